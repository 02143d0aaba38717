//! Per-node GPU time for the profiler (`crate::profile`): with `timestamp-query`, timestamps
//! written before and after every dispatch, each dispatch in a compute pass of its own (the
//! one place a timestamp may be written without `timestamp-query-inside-passes`, which
//! browsers do not offer); without it, each dispatch submitted alone and waited for, timed by
//! the caller's clock.

use std::collections::HashMap;

use super::super::device::{map_read, queue_done};
use super::{gpu_err, GpuSession};
use crate::ir::NodeId;
use crate::tensor::Tensor;
use crate::Result;

/// wgpu's cap on the queries of one query set (`wgpu::QUERY_SET_MAX_QUERIES`); two per dispatch.
const DISPATCHES_PER_SET: usize = wgpu::QUERY_SET_MAX_QUERIES as usize / 2;

impl GpuSession {
    /// Milliseconds per run of each node that dispatches (its dispatches summed), over `runs`
    /// runs after one untimed one; `true` when the figures are GPU timestamps, `false` when each
    /// dispatch was submitted alone and timed by `clock` (milliseconds) around its wait.
    pub async fn time_nodes(
        &self,
        inputs: &HashMap<String, Tensor>,
        runs: usize,
        clock: &dyn Fn() -> f64,
    ) -> Result<(Vec<(NodeId, f64)>, bool)> {
        self.upload(inputs)?;
        let scope = self
            .gpu
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let mut total = vec![0.0; self.steps.len()];
        let stamps = self.gpu.timestamps && !self.steps.is_empty();
        if stamps {
            self.time_with_timestamps(runs, &mut total).await?;
        } else {
            for run in 0..=runs {
                for (s, t) in self.steps.iter().zip(total.iter_mut()) {
                    let t0 = clock();
                    let mut enc = self.encoder();
                    s.encode(&mut enc.begin_compute_pass(&Default::default()));
                    self.gpu.queue.submit([enc.finish()]);
                    queue_done(&self.gpu).await?;
                    if run > 0 {
                        *t += clock() - t0;
                    }
                }
            }
        }
        if let Some(e) = scope.pop().await {
            return Err(gpu_err(format!("timing dispatches: {e}")));
        }
        let per_run = runs.max(1) as f64;
        let per_node = self
            .steps
            .iter()
            .zip(total)
            .map(|(s, t)| (s.node, t / per_run));
        Ok((per_node.collect(), stamps))
    }

    async fn time_with_timestamps(&self, runs: usize, total: &mut [f64]) -> Result<()> {
        let device = &self.gpu.device;
        let most = self.steps.len().min(DISPATCHES_PER_SET);
        let set = device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("profile"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * most as u32,
        });
        let bytes = 16 * most as u64;
        let buffer = |usage| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("profile timestamps"),
                size: bytes,
                usage,
                mapped_at_creation: false,
            })
        };
        let resolved = buffer(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC);
        let staging = buffer(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        // Nanoseconds per tick.
        let period = self.gpu.queue.get_timestamp_period() as f64;
        for run in 0..=runs {
            for (c, steps) in self.steps.chunks(DISPATCHES_PER_SET).enumerate() {
                let mut enc = self.encoder();
                for (i, s) in steps.iter().enumerate() {
                    let writes = wgpu::ComputePassTimestampWrites {
                        query_set: &set,
                        beginning_of_pass_write_index: Some(2 * i as u32),
                        end_of_pass_write_index: Some(2 * i as u32 + 1),
                    };
                    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: Some(writes),
                    });
                    s.encode(&mut pass);
                }
                let n = 2 * steps.len() as u32;
                enc.resolve_query_set(&set, 0..n, &resolved, 0);
                enc.copy_buffer_to_buffer(&resolved, 0, &staging, 0, 8 * n as u64);
                self.gpu.queue.submit([enc.finish()]);
                map_read(&self.gpu, &staging).await?;
                {
                    let view = staging
                        .slice(..)
                        .get_mapped_range()
                        .map_err(|e| gpu_err(format!("reading timestamps: {e}")))?;
                    let tick = |k: usize| {
                        let b: [u8; 8] = view[8 * k..8 * k + 8].try_into().expect("8 bytes");
                        u64::from_le_bytes(b)
                    };
                    if run > 0 {
                        for i in 0..steps.len() {
                            let ticks = tick(2 * i + 1).saturating_sub(tick(2 * i));
                            total[c * DISPATCHES_PER_SET + i] += ticks as f64 * period / 1e6;
                        }
                    }
                }
                staging.unmap();
            }
        }
        Ok(())
    }

    fn encoder(&self) -> wgpu::CommandEncoder {
        (self.gpu.device).create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None })
    }
}
