//! The GPU: one adapter, device and queue (wgpu: the browser's WebGPU in wasm, Vulkan natively,
//! where Mesa's lavapipe is a CPU implementation CI can run).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::{Error, Result};

/// A device to prepare sessions on. Cheap to clone: sessions hold clones of its handles.
#[derive(Clone)]
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    info: wgpu::AdapterInfo,
    lost: Arc<Mutex<Option<String>>>,
    /// The device writes timestamps around compute passes (`timestamp-query`).
    pub(crate) timestamps: bool,
    /// Sessions hold float16 values as f16 (`shader-f16`; `ops::wgsl::with_half_bindings`).
    pub(crate) half: bool,
}

pub(crate) fn gpu_err(msg: impl std::fmt::Display) -> Error {
    Error::Other(format!("webgpu: {msg}"))
}

impl Gpu {
    /// Finds an adapter and opens a device with the adapter's own limits. No adapter (no GPU, no
    /// driver, a browser without WebGPU) is an error that says so; callers may fall back to the
    /// reference backend, and should say that they did.
    pub async fn new() -> Result<Gpu> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN | wgpu::Backends::BROWSER_WEBGPU;
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                gpu_err(format!(
                    "no adapter ({e}); natively this needs a Vulkan driver (Mesa's lavapipe: \
                     apt-get install mesa-vulkan-drivers), in a browser WebGPU"
                ))
            })?;
        let limits = adapter.limits();
        // Only the profiler reads timestamps; asking costs nothing where the adapter has them.
        // The wasm API has no GPU profile, so the browser's device is opened without.
        // float16 storage wherever the adapter has `shader-f16`.
        #[cfg(not(target_arch = "wasm32"))]
        let features =
            adapter.features() & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16);
        #[cfg(target_arch = "wasm32")]
        let features = adapter.features() & wgpu::Features::SHADER_F16;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("fuselab"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| gpu_err(format!("cannot open the device: {e}")))?;
        let lost = Arc::new(Mutex::new(None));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            if let Ok(mut l) = flag.lock() {
                *l = Some(format!("{reason:?}: {message}"));
            }
        });
        Ok(Gpu {
            device,
            queue,
            limits,
            info: adapter.get_info(),
            lost,
            timestamps: features.contains(wgpu::Features::TIMESTAMP_QUERY),
            half: features.contains(wgpu::Features::SHADER_F16),
        })
    }

    /// "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan, Cpu)" and the like.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {:?})",
            self.info.name, self.info.backend, self.info.device_type
        )
    }

    /// Releases the device now. Sessions on it then fail with an error saying the device was
    /// lost, as they do when a driver reset or the browser takes the device back.
    pub fn destroy(&self) {
        self.device.destroy();
    }

    /// This device with buffers capped at `bytes` (at most the adapter's own limit): a session
    /// prepared on it fails the way it would on a device that small, e.g. a browser's 128 MiB.
    pub fn with_max_binding_bytes(mut self, bytes: u64) -> Gpu {
        let cap = bytes.min(self.max_binding_bytes());
        self.limits.max_storage_buffer_binding_size = cap;
        self.limits.max_buffer_size = cap;
        self
    }

    /// True when the device writes GPU timestamps (`timestamp-query`), which the profiler
    /// reads around each dispatch.
    pub fn has_timestamps(&self) -> bool {
        self.timestamps
    }

    /// This device as if its adapter had no `timestamp-query`: the profiler then times each
    /// dispatch by submitting it alone (the fallback, testable on any adapter).
    pub fn without_timestamps(mut self) -> Gpu {
        self.timestamps = false;
        self
    }

    /// True when sessions on this device hold float16 values as f16 (the adapter has
    /// `shader-f16`): half the bytes of f32, the arithmetic still in f32.
    pub fn has_f16(&self) -> bool {
        self.half
    }

    /// This device as if its adapter had no `shader-f16`: float16 values are held widened to
    /// f32 (the fallback, testable on any adapter).
    pub fn without_f16(mut self) -> Gpu {
        self.half = false;
        self
    }

    /// Largest buffer a kernel may bind.
    pub fn max_binding_bytes(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
    }

    /// An error if the device was lost (driver reset, the browser took it back).
    pub(crate) fn check_lost(&self) -> Result<()> {
        match self.lost.lock().ok().and_then(|l| l.clone()) {
            Some(why) => Err(gpu_err(format!(
                "the device was lost ({why}); make a new Gpu and session"
            ))),
            None => Ok(()),
        }
    }
}

/// Maps `buffer` for reading and waits: natively by polling the device, in the browser by
/// awaiting the callback, which its event loop runs.
pub(crate) async fn map_read(gpu: &Gpu, buffer: &wgpu::Buffer) -> Result<()> {
    let (done, set) = oneshot();
    buffer.map_async(wgpu::MapMode::Read, .., move |r| {
        set(r.map_err(|e| e.to_string()))
    });
    wait(gpu, done)
        .await?
        .map_err(|e| gpu_err(format!("reading results back: {e}")))
}

/// Waits until the GPU has finished the work submitted so far.
pub(crate) async fn queue_done(gpu: &Gpu) -> Result<()> {
    let (done, set) = oneshot();
    gpu.queue.on_submitted_work_done(move || set(Ok(())));
    wait(gpu, done)
        .await?
        .map_err(|e| gpu_err(format!("waiting for the device: {e}")))
}

/// Awaits a wgpu callback's result: natively after polling the device until it is idle (the
/// callback has then run), in the browser when its event loop runs it.
async fn wait(gpu: &Gpu, done: Oneshot) -> Result<std::result::Result<(), String>> {
    #[cfg(not(target_arch = "wasm32"))]
    gpu.device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| gpu_err(format!("waiting for the device: {e}")))?;
    let r = done.await;
    gpu.check_lost()?;
    Ok(r)
}

/// A result a wgpu callback sets (through the returned function) and a future awaits.
fn oneshot() -> (
    Oneshot,
    impl FnOnce(std::result::Result<(), String>) + Send + 'static,
) {
    let shared = Arc::new(Mutex::new(Shared {
        result: None,
        waker: None,
    }));
    let s2 = shared.clone();
    let set = move |r| {
        if let Ok(mut s) = s2.lock() {
            s.result = Some(r);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    };
    (Oneshot(shared), set)
}

struct Shared {
    result: Option<std::result::Result<(), String>>,
    waker: Option<Waker>,
}

struct Oneshot(Arc<Mutex<Shared>>);

impl Future for Oneshot {
    type Output = std::result::Result<(), String>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut s = match self.0.lock() {
            Ok(s) => s,
            Err(_) => return Poll::Ready(Err("poisoned".into())),
        };
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}
