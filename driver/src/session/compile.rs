//! Compiling a serialized program in process: import, lowering, the cached compile, and the
//! shared clients and executable cache the programs of a process run on.

use super::{ArgInfo, Program, SessionOptions};
use crate::exec::{self, CompileRequest, ExecError, Target};
use crate::{DriverError, Emit, LowerOptions};
use std::path::PathBuf;
use std::time::Instant;
use tpuc_ir::TensorType;
use tpuc_runtime as rt;

/// Imports, lowers and compiles a serialized program.
pub fn compile(program: Vec<u8>, options: &SessionOptions) -> Result<Program, DriverError> {
    let start = Instant::now();
    let imported = crate::import_bytes(program)?;
    if let Some(e) = imported.host_read_error() {
        return Err(e.into());
    }
    let import_time = start.elapsed();
    let inputs = imported.inputs.clone();
    let outputs = imported.outputs.clone();
    let checks = imported.checks();
    let module_dump = options.dump_dir.as_ref().map(|d| d.join(&options.name));
    let lower_options = LowerOptions {
        verify_each: options.verify_each,
        dump_dir: module_dump.as_ref().map(|d| d.join("passes")),
        debug_locations: false,
        // Not the graph's name: equal graphs must give equal programs (and cache keys).
        module_name: None,
        // The pass pipeline for the target (TPU legalization, precision defaults).
        target: options.target,
        precision: options.precision,
        conv_precision: options.conv_precision,
        bf16: options.bf16,
        allow_excess_precision: options.allow_excess_precision,
        no_fusion: options.no_fusion,
        sharding: options.sharding.clone(),
        shard_policy: options.shard_policy,
        ranks: options.ranks.clone(),
        donate_state: options.donate,
        ..Default::default()
    };
    let (mut lowered, size_args, result_layouts, size_results) = match &options.bucket {
        Some(bucket) => {
            let b = crate::lower_bucket(&imported.module, &imported.weights, bucket, &lower_options, Emit::StableHlo)?;
            (b.lowered, b.size_args, b.result_layouts, b.size_results)
        }
        None => (crate::lower(imported, &lower_options, Emit::StableHlo)?, Vec::new(), Vec::new(), Vec::new()),
    };
    lowered.timings.import = import_time;
    let module = &lowered.module;
    exec::check_target_support(module, options.target)?;
    let func = module.main_func().ok_or_else(|| ExecError::Unsupported("the program has no function".into()))?;
    let entry = module.entry_block(func);
    let mut args = Vec::new();
    for (i, (&v, info)) in module.blocks[entry].args().iter().zip(&func.args).enumerate() {
        let ty = module.values[v].ty.clone();
        let bytes = ty.size_bytes().ok_or_else(|| {
            ExecError::Unsupported(format!(
                "argument {i} (`{}`) has the dynamic type {ty}: tpuc compiles one program per shape; \
                 retrace with static shapes",
                info.name
            ))
        })?;
        args.push(ArgInfo { name: info.name.clone(), kind: info.kind, ty, bytes });
    }
    let mut results: Vec<TensorType> = match module.terminator(entry) {
        Some(ret) => module.ops[ret].operands().iter().map(|&v| module.values[v].ty.clone()).collect(),
        None => Vec::new(),
    };
    // Data-dependent sizes come last; the caller sees the results they cut.
    results.truncate(results.len() - size_results.len());
    if let Some(t) = results.iter().find(|t| t.static_dims().is_none()) {
        return Err(ExecError::Unsupported(format!("a result has the dynamic type {t}")).into());
    }
    let stablehlo = lowered.stablehlo.as_deref().unwrap_or_default();
    if let Some(dir) = &module_dump {
        write(dir, "module.tpuc", tpuc_ir::print_module(module).as_bytes())?;
        write(dir, "module.stablehlo.mlir", stablehlo.as_bytes())?;
    }
    let request = CompileRequest {
        target: options.target,
        topology: options.topology.clone(),
        partitions: lowered.sharding.as_ref().map_or(1, crate::spmd::device_count),
        replicas: lowered.ranks.as_ref().map_or(1, |r| r.count),
        plugin: options.plugin.clone(),
    };
    // The key hashes the text just emitted (emitted without locations, as keys need).
    let compiled = exec::compile_cached(stablehlo, &lowered.key_program()?, &request, cache(), lowered.provenance(&options.name))?;
    if let Some(dir) = &module_dump {
        let json = serde_json::to_vec_pretty(&compiled.summary).unwrap_or_default();
        write(dir, "compile.json", &json)?;
        if compiled.loaded.is_none() {
            write(dir, "executable.bin", &compiled.serialized)?;
        }
    }
    let mut compiled = compiled;
    if options.target == Target::Cpu && compiled.loaded.is_some() {
        // Run on the process's shared synchronous CPU client (see `run_client`).
        let client = run_client(&compiled, request.devices())?;
        compiled.loaded = Some(client.deserialize(&compiled.serialized).map_err(ExecError::from)?);
    }
    let device = match &compiled.loaded {
        Some(l) => Some(l.devices().first().cloned().ok_or_else(|| {
            ExecError::Unsupported("the loaded executable has no device".into())
        })?),
        None => None,
    };
    let state_updates = if options.donate { module.state_aliases() } else { Vec::new() };
    let user_args: Vec<usize> = args.iter().enumerate().filter(|(_, a)| !a.kind.is_weight()).map(|(i, _)| i).collect();
    let tensor_inputs = user_args.iter().copied().filter(|a| !size_args.iter().any(|(_, s)| s == a)).collect();
    let resident: Vec<Option<std::sync::Arc<rt::Buffer>>> = args.iter().map(|_| None).collect();
    Ok(Program {
        name: options.name.clone(),
        inputs,
        outputs,
        checks,
        args,
        results,
        stablehlo: lowered.stablehlo.unwrap_or_default(),
        summary: compiled.summary,
        timings: lowered.timings,
        serialized: compiled.serialized,
        loaded: compiled.loaded,
        device,
        user_args,
        tensor_inputs,
        size_args,
        size_results,
        result_layouts,
        resident_shards: if lowered.sharding.is_some() { resident.iter().map(|_| None).collect() } else { Vec::new() },
        aliases: resident.iter().map(|_| None).collect(),
        resident,
        sharding: lowered.sharding,
        ranks: lowered.ranks.map(|r| r.count),
        staging: Default::default(),
        scalars: Default::default(),
        state_updates,
    })
}

/// The client programs run on, one per plugin file and process, shared by every program (so
/// their buffers can meet). On CPU it is created with `asynchronous=false`: an execution runs
/// on the calling thread instead of being handed to the plugin's worker threads and waited for,
/// which on a small host is most of the cost of running a small graph.
/// SPMD programs over `devices` > 1 get a client of that many devices, shared the same way.
fn run_client(compiled: &exec::Compiled, devices: i64) -> Result<rt::Client, ExecError> {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static CLIENTS: std::sync::OnceLock<Mutex<HashMap<(PathBuf, i64), rt::Client>>> = std::sync::OnceLock::new();
    let plugin = compiled.loaded.as_ref().map(|l| l.client().plugin()).ok_or_else(|| {
        ExecError::Unsupported("no loaded executable to take the plugin from".into())
    })?;
    let mut clients = CLIENTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let key = (plugin.path().to_path_buf(), devices);
    if let Some(c) = clients.get(&key) {
        return Ok(c.clone());
    }
    let sync = std::env::var("TPUC_CPU_ASYNC").map_or(true, |v| v != "1");
    let mut options = Vec::new();
    if sync {
        options.push(rt::NamedValue::bool("asynchronous", false));
    }
    if devices > 1 {
        options.push(rt::NamedValue::int("cpu_device_count", devices));
    }
    let client = plugin.create_client_with_options(&options)?;
    clients.insert(key, client.clone());
    Ok(client)
}

/// The process's executable cache, configured by the `TPUC_CACHE_*` variables when first used.
pub fn cache() -> &'static exec::Cache {
    static CACHE: std::sync::OnceLock<exec::Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(exec::Cache::from_env)
}

fn write(dir: &std::path::Path, file: &str, data: &[u8]) -> Result<(), ExecError> {
    let path = dir.join(file);
    std::fs::create_dir_all(dir)
        .and_then(|_| std::fs::write(&path, data))
        .map_err(|source| ExecError::Write { path: path.display().to_string(), source })
}
