//! Shape ops: views (view, reshape, permute, expand, squeeze, ...), copies and dtype casts,
//! slicing and joining, padding, repetition.
//!
//! Views become value semantics: the IR has no aliasing, and torch.export graphs are
//! functional. Sizes may be symbolic; a slice of a symbolic dim that is not taken whole
//! becomes a gather with an iota index (the IR's `slice` needs static bounds).
//!
//! The registry table of the family; the lowerings are in submodules: `views`, `slicing`,
//! `repeat`, `pad` and `rearrange`.

mod diagonal;
mod pad;
mod rearrange;
mod repeat;
mod slicing;
mod views;

pub use pad::*;
use rearrange::*;
pub use repeat::*;
pub use slicing::*;
pub use views::*;

use super::*;

pub const OPS: &[(&str, OpFn)] = &[
    ("view.default", view),
    ("view_copy.default", view),
    ("_unsafe_view.default", view),
    ("reshape.default", reshape),
    ("_reshape_alias.default", view),
    ("_reshape_alias_copy.default", view),
    ("alias.default", identity),
    ("alias_copy.default", identity),
    ("clone.default", identity),
    ("contiguous.default", identity),
    ("detach.default", identity),
    ("detach_.default", identity),
    ("detach_copy.default", identity),
    ("lift_fresh_copy.default", identity),
    ("lift_fresh.default", identity),
    ("_assert_tensor_metadata.default", noop),
    ("_assert_async.msg", noop),
    ("_assert_async.default", noop),
    ("_assert_scalar.default", noop),
    ("sym_constrain_range.default", noop),
    ("sym_constrain_range_for_size.default", noop),
    ("_functional_sym_constrain_range.default", noop),
    ("_functional_sym_constrain_range_for_size.default", noop),
    ("copy.default", copy),
    ("_to_copy.default", to_copy),
    ("to.dtype", to_copy),
    ("to.dtype_layout", to_copy),
    ("to.device", to_copy),
    ("to.other", to_other),
    ("torch.ops.prims.convert_element_type.default", convert_element_type),
    ("type_as.default", to_other),
    ("permute.default", permute),
    ("permute_copy.default", permute),
    ("transpose.int", transpose),
    ("transpose_copy.int", transpose),
    ("swapaxes.default", swapaxes),
    ("swapdims.default", swapaxes),
    ("t.default", t),
    ("t_copy.default", t),
    ("numpy_T.default", numpy_t),
    ("mT.default", m_t),
    ("movedim.int", movedim),
    ("movedim.intlist", movedim),
    ("moveaxis.int", movedim),
    ("expand.default", expand),
    ("expand_copy.default", expand),
    ("expand_as.default", expand_as),
    ("broadcast_to.default", expand),
    ("unsqueeze.default", unsqueeze),
    ("unsqueeze_copy.default", unsqueeze),
    ("squeeze.default", squeeze),
    ("squeeze.dim", squeeze),
    ("squeeze.dims", squeeze),
    ("squeeze_copy.default", squeeze),
    ("squeeze_copy.dim", squeeze),
    ("squeeze_copy.dims", squeeze),
    ("flatten.using_ints", flatten),
    ("unflatten.int", unflatten),
    ("split.Tensor", split),
    ("split_copy.Tensor", split),
    ("split.sizes", split_with_sizes),
    ("split_with_sizes.default", split_with_sizes),
    ("split_with_sizes_copy.default", split_with_sizes),
    ("chunk.default", chunk),
    ("unbind.int", unbind),
    ("unbind_copy.int", unbind),
    ("cat.default", cat),
    ("concat.default", cat),
    ("concatenate.default", cat),
    ("stack.default", stack),
    ("hstack.default", hstack),
    ("vstack.default", vstack),
    ("slice.Tensor", slice),
    ("slice_copy.Tensor", slice),
    ("select.int", select),
    ("select_copy.int", select),
    ("narrow.default", narrow),
    ("narrow_copy.default", narrow),
    ("diagonal.default", diagonal::diagonal),
    ("diagonal_copy.default", diagonal::diagonal),
    ("diagonal_scatter.default", diagonal::diagonal_scatter),
    ("repeat.default", repeat),
    ("repeat_interleave.self_int", repeat_interleave),
    ("view_as.default", view_as),
    ("reshape_as.default", view_as),
    ("tile.default", tile),
    ("flip.default", flip),
    ("roll.default", roll),
    ("constant_pad_nd.default", constant_pad_nd),
    ("pad.default", pad),
    ("reflection_pad1d.default", reflection_pad),
    ("reflection_pad2d.default", reflection_pad),
    ("reflection_pad3d.default", reflection_pad),
    ("replication_pad1d.default", replication_pad),
    ("replication_pad2d.default", replication_pad),
    ("replication_pad3d.default", replication_pad),
    ("pixel_shuffle.default", pixel_shuffle),
    ("pixel_unshuffle.default", pixel_unshuffle),
    ("as_strided.default", as_strided),
    ("as_strided_copy.default", as_strided),
    ("as_strided_scatter.default", as_strided_scatter),
    ("unfold.default", unfold),
];
