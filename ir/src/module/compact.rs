//! Compaction: erased ops and every entity no function reaches are dropped, the rest
//! renumbered in walk order; the printed module does not change.

use super::*;

impl Module {
    /// Drops erased ops, their results and regions, and every block, region, value and
    /// location no function reaches, renumbering the rest in walk order (as naga's
    /// `compact`). Ids held across the call are invalid afterwards. Detached ops that are not
    /// erased are dropped too. The printed module is unchanged.
    pub fn compact(&mut self) {
        // The old module is consumed: attributes, types and locations move, nothing is cloned.
        let mut old = std::mem::take(self);
        let mut new = Module { symbols: std::mem::take(&mut old.symbols), mesh: old.mesh.take(), ..Module::default() };
        let mut vmap: SecondaryMap<ValueId, Option<ValueId>> = SecondaryMap::with_default(None);
        let mut lmap: SecondaryMap<LocId, Option<LocId>> = SecondaryMap::with_default(None);
        let funcs = std::mem::take(&mut old.funcs);
        for f in funcs {
            let body = old.compact_region(f.body, None, &mut new, &mut vmap, &mut lmap);
            new.funcs.push(Func { name: f.name, body, args: f.args, results: f.results });
        }
        *self = new;
    }

    /// Moves region `r` of `self` (being compacted away) into `new`.
    fn compact_region(
        &mut self,
        r: RegionId,
        parent: Option<OpId>,
        new: &mut Module,
        vmap: &mut SecondaryMap<ValueId, Option<ValueId>>,
        lmap: &mut SecondaryMap<LocId, Option<LocId>>,
    ) -> RegionId {
        let nr = new.regions.push(RegionData { blocks: Vec::new(), parent });
        for b in std::mem::take(&mut self.regions[r].blocks) {
            let nb = new.blocks.push(BlockData::new(Some(nr)));
            new.regions[nr].blocks.push(nb);
            for (i, &a) in self.blocks[b].args.iter().enumerate() {
                let ty = take_type(&mut self.values[a].ty);
                let na = new.values.push(ValueData::new(ty, ValueDef::BlockArg { block: nb, index: i as u32 }));
                new.blocks[nb].args.push(na);
                vmap.set(a, Some(na));
            }
            let mut cur = self.first_op(b);
            while let Some(op) = cur {
                cur = self.next_op(op);
                // Regions first: their ops get the lower ids, as when they were built.
                let regions: SmallVec<[RegionId; 1]> = std::mem::take(&mut self.ops[op].regions)
                    .into_iter()
                    .map(|ir| self.compact_region(ir, None, new, vmap, lmap))
                    .collect();
                let d = &mut self.ops[op];
                let operands: SmallVec<[ValueId; 3]> =
                    d.operands.iter().map(|&v| vmap[v].expect("compact needs a verified module")).collect();
                let attrs = std::mem::take(&mut d.attrs);
                let (opcode, results) = (d.opcode, std::mem::take(&mut d.results));
                let types: Vec<TensorType> = results.iter().map(|&v| take_type(&mut self.values[v].ty)).collect();
                let nop = new.create_op_unchecked(opcode, &operands, attrs, types, &regions);
                new.append_op(nb, nop);
                for (&o, &n) in results.iter().zip(&new.ops[nop].results) {
                    vmap.set(o, Some(n));
                }
                if let Some(l) = *self.op_locs.get(op) {
                    let nl = match lmap[l] {
                        Some(nl) => nl,
                        None => {
                            let nl = new.locs.push(std::mem::take(&mut self.locs[l]));
                            lmap.set(l, Some(nl));
                            nl
                        }
                    };
                    new.op_locs.set(nop, Some(nl));
                }
            }
        }
        nr
    }
}

/// The type, leaving a rank-0 one of the same dtype (no allocation) in its place.
fn take_type(ty: &mut TensorType) -> TensorType {
    std::mem::replace(ty, TensorType { dtype: ty.dtype, dims: Dims::new() })
}
