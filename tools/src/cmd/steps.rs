//! `tpuc run DIR --steps N`: replay a training step exported by `tpuc.train_step(...).export`,
//! its state resident and donated from step to step, and print the losses and time per step.

use tpuc_driver::step_export::{StepExport, StepRunner};
use tpuc_driver::tensor::HostTensor;
use tpuc_driver::{DriverError, Emit};

use crate::common::{compile_lowered, report_passes, Failure};

use super::run::RunArgs;

pub fn replay(a: &RunArgs, steps: usize) -> Result<(), Failure> {
    let start = tpuc_driver::session::transfers();
    let export = StepExport::open(&a.model)?;
    let m = &export.manifest;
    if a.inputs.len() != m.batch.len() {
        let want: Vec<String> = m.batch.iter().map(|b| format!("{}{:?}", b.dtype, b.shape)).collect();
        return Err(Failure::User(format!(
            "{}: a step takes {} batch input(s) ({}{}), got {} --inputs",
            a.model.display(),
            m.batch.len(),
            want.join(", "),
            if m.accumulate > 1 { format!("; {} micro-batches", m.accumulate) } else { String::new() },
            a.inputs.len()
        )));
    }
    let mut batch = Vec::with_capacity(a.inputs.len());
    for p in &a.inputs {
        let t = HostTensor::read_npy(p).map_err(|e| Failure::User(e.to_string()))?;
        batch.push((p.display().to_string(), t));
    }
    let imported = export.import()?;
    let options = tpuc_driver::LowerOptions { donate_state: true, ..a.pipeline.options(false, a.target.target)? };
    let lowered = tpuc_driver::lower(imported, &options, Emit::StableHlo)?;
    report_passes(&lowered, options.pass_timing);
    let cache = a.target.cache.open();
    let compiled = compile_lowered(&lowered, &a.target, cache.as_ref(), &a.model.display().to_string())?;
    tracing::info!("{}", compiled.summary.line());
    let mut runner = StepRunner::new(&compiled, &lowered.module, &lowered.weights).map_err(DriverError::from)?;
    let wants_seed = tpuc_driver::dynamic::user_input_types(&lowered.module)
        .last()
        .is_some_and(|(n, _)| n == tpuc_driver::SEED_INPUT);
    let mut losses = Vec::with_capacity(steps);
    let mut ms = Vec::with_capacity(steps);
    let mut exec_ms = Vec::with_capacity(steps);
    let after_upload = tpuc_driver::session::transfers();
    for i in 0..steps {
        let mut inputs = vec![("the learning rates".to_string(), export.lr_input())];
        inputs.extend(batch.iter().cloned());
        if wants_seed {
            inputs.push((format!("--seed {} + step", a.seed), tpuc_driver::dynamic::seed_tensor(a.seed.wrapping_add(i as u64))));
        }
        let t = std::time::Instant::now();
        let (outs, times) = runner.step(&inputs).map_err(DriverError::from)?;
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        let loss = outs.first().map(|o| o.element_f64(0)).unwrap_or(f64::NAN);
        if !a.json {
            println!("step {}: loss {loss:.6} ({elapsed:.3} ms)", m.steps_done as usize + i + 1);
        }
        losses.push(loss);
        ms.push(elapsed);
        exec_ms.push(times.execute.as_secs_f64() * 1e3);
    }
    let moved = tpuc_driver::session::transfers().since(&after_upload);
    let median = |v: &[f64]| {
        // The first step includes warm-up (allocations, autotuning): left out when there are more.
        let mut v: Vec<f64> = if v.len() > 1 { v[1..].to_vec() } else { v.to_vec() };
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let total = tpuc_driver::session::transfers().since(&start);
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "steps": steps,
                "losses": losses,
                "ms_per_step": median(&ms),
                "execute_ms": median(&exec_ms),
                "state_updates": runner.state_updates(),
                "h2d_bytes": total.h2d_bytes,
                "d2h_bytes": total.d2h_bytes,
                "h2d_bytes_per_step": moved.h2d_bytes as f64 / steps.max(1) as f64,
                "d2h_bytes_per_step": moved.d2h_bytes as f64 / steps.max(1) as f64,
                "cache": compiled.summary.cache,
            })
        );
    } else {
        println!(
            "{steps} steps: median {:.3} ms/step (execute {:.3} ms); per step {} B up, {} B down",
            median(&ms),
            median(&exec_ms),
            moved.h2d_bytes / steps.max(1) as u64,
            moved.d2h_bytes / steps.max(1) as u64
        );
    }
    Ok(())
}
