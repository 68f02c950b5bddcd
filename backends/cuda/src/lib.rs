//! flashoverlap-cuda: the GPU executor.
//!
//! Runs a [`Program`] — buffers, streams, sync events and steps in issue order — on the
//! GPUs of this process: cuBLAS bf16 GEMMs, elementwise kernels compiled by NVRTC,
//! copy-engine copies (peer copies across devices), NCCL point-to-point transfers (one
//! communicator over the program's NCCL ranks, each transfer one group), stream waits,
//! and a pair of timing events around every span. One host thread issues every step, in
//! the program's order (which the lowering made a valid issue order: every event is
//! recorded before it is waited on; NCCL groups are issued in one global order, so every
//! pair of ranks sees its transfers in the same order).
//!
//! A watchdog ([`Loaded::set_watchdog`]) bounds each run: when the GPUs have not finished
//! in time it names the span that started and did not end (or the first that never
//! started), aborts the communicator, and the `Loaded` is not used again.
//!
//! Missing pieces are reported, never panicked on: [`probe`] checks for the driver,
//! cuBLAS and NVRTC libraries and for a GPU before any of them is called, [`probe_nccl`]
//! for NCCL. The only crate of the project with `unsafe`.

mod program;

pub use program::*;

use cudarc::cublas::sys as cublas;
use cudarc::driver::{result as cu, sys as drv};
use cudarc::nccl::{result as nc, sys as ncs};
use std::cell::Cell;
use std::ffi::{CStr, CString, c_void};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CudaError {
    #[error("the library `{lib}` was not found on the loader path; {hint}")]
    MissingLibrary {
        lib: &'static str,
        hint: &'static str,
    },
    #[error("no CUDA GPU is visible ({0})")]
    NoGpu(String),
    #[error("the program needs {need} GPUs, {have} are visible")]
    TooFewGpus { need: u32, have: u32 },
    #[error("CUDA driver call `{call}` failed: {msg}")]
    Driver { call: &'static str, msg: String },
    #[error("cuBLAS call `{call}` failed with status {status}")]
    Cublas { call: &'static str, status: String },
    #[error("NVRTC could not compile the kernels: {0}")]
    Nvrtc(String),
    #[error("invalid program: {0}")]
    Program(String),
    #[error("NCCL call `{call}` failed: {msg}")]
    Nccl { call: &'static str, msg: String },
    /// The watchdog fired: the run had not finished after `secs`. `span` is the timed
    /// span that started and never ended (`started`), or else the first span in issue
    /// order that never started; `None` when every span ended (a trailing wait hung).
    #[error("the run had not finished after {secs} s (watchdog); span {span:?} {}", if *started { "started and did not end" } else { "never started" })]
    Hung {
        secs: f64,
        span: Option<u32>,
        stream: Option<u32>,
        started: bool,
    },
    #[error("this executor was stopped by its watchdog and cannot run again")]
    Stopped,
}

const CU_HINT: &str = "on the lent H200 set LD_LIBRARY_PATH to the nvidia/cu13/lib folder of \
                       the Python site-packages";
const NCCL_HINT: &str = "it is opened as libnccl.so: pip's nvidia-nccl wheel ships only \
                         libnccl.so.2, so link libnccl.so to it in a folder on LD_LIBRARY_PATH";

type Result<T> = std::result::Result<T, CudaError>;

fn drv_err(call: &'static str) -> impl FnOnce(cu::DriverError) -> CudaError {
    move |e| CudaError::Driver {
        call,
        msg: format!("{e:?}"),
    }
}

fn blas(call: &'static str, s: cublas::cublasStatus_t) -> Result<()> {
    if s == cublas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Cublas {
            call,
            status: format!("{s:?}"),
        })
    }
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub ordinal: u32,
    pub name: String,
    pub sm_count: u32,
    pub memory_bytes: u64,
    pub compute_capability: (i32, i32),
}

/// Check the libraries and list the GPUs, without panicking when something is missing.
pub fn probe() -> Result<Vec<DeviceInfo>> {
    // SAFETY: only tries to open the shared libraries.
    unsafe {
        if !drv::is_culib_present() {
            return Err(CudaError::MissingLibrary {
                lib: "libcuda",
                hint: "it comes with the NVIDIA driver",
            });
        }
        if !cublas::is_culib_present() {
            return Err(CudaError::MissingLibrary {
                lib: "libcublas",
                hint: CU_HINT,
            });
        }
        if !cudarc::nvrtc::sys::is_culib_present() {
            return Err(CudaError::MissingLibrary {
                lib: "libnvrtc",
                hint: CU_HINT,
            });
        }
    }
    cu::init().map_err(|e| CudaError::NoGpu(format!("cuInit: {e:?}")))?;
    let n = cu::device::get_count().map_err(drv_err("cuDeviceGetCount"))?;
    if n <= 0 {
        return Err(CudaError::NoGpu("cuDeviceGetCount returned 0".into()));
    }
    let mut out = Vec::new();
    for i in 0..n {
        let dev = cu::device::get(i).map_err(drv_err("cuDeviceGet"))?;
        let attr = |a| unsafe { cu::device::get_attribute(dev, a) };
        let sm = attr(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(drv_err("cuDeviceGetAttribute"))?;
        let major = attr(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .map_err(drv_err("cuDeviceGetAttribute"))?;
        let minor = attr(drv::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .map_err(drv_err("cuDeviceGetAttribute"))?;
        out.push(DeviceInfo {
            ordinal: i as u32,
            name: cu::device::get_name(dev).map_err(drv_err("cuDeviceGetName"))?,
            sm_count: sm as u32,
            memory_bytes: unsafe { cu::device::total_mem(dev) }
                .map_err(drv_err("cuDeviceTotalMem"))? as u64,
            compute_capability: (major, minor),
        });
    }
    Ok(out)
}

/// Check that NCCL can be opened; its version (e.g. 22807 for 2.28.7).
pub fn probe_nccl() -> Result<i32> {
    // SAFETY: only tries to open the shared library.
    if !unsafe { ncs::is_culib_present() } {
        return Err(CudaError::MissingLibrary {
            lib: "libnccl",
            hint: NCCL_HINT,
        });
    }
    nc::get_nccl_version().map_err(|e| nccl_err("ncclGetVersion", e))
}

fn nccl_err(call: &'static str, e: nc::NcclError) -> CudaError {
    // SAFETY: ncclGetErrorString returns a static string for any result code.
    let msg = unsafe {
        let p = ncs::ncclGetErrorString(e.0);
        if p.is_null() {
            format!("{:?}", e.0)
        } else {
            format!("{:?} ({})", e.0, CStr::from_ptr(p).to_string_lossy())
        }
    };
    CudaError::Nccl { call, msg }
}

/// This process runs one NCCL rank of a program that spans several processes (and, with
/// NCCL's bootstrap, several nodes): only the steps, buffers and streams of device
/// `rank` (the program's device ordinal = NCCL rank), placed on local GPU `device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Local {
    pub rank: u32,
    pub world: u32,
    /// Local GPU ordinal this rank uses.
    pub device: u32,
    /// The communicator's unique id (from [`nccl_unique_id`] on one process, shared with
    /// the others out of band).
    pub id: [u8; 128],
}

/// A fresh NCCL unique id (with `NCCL_COMM_ID=host:port` set, NCCL derives it from that
/// address, so every process gets the same one).
pub fn nccl_unique_id() -> Result<[u8; 128]> {
    probe_nccl()?;
    let id = nc::get_uniqueid().map_err(|e| nccl_err("ncclGetUniqueId", e))?;
    Ok(id.internal.map(|c| c as u8))
}

struct Dev {
    ctx: drv::CUcontext,
    module: drv::CUmodule,
    f_fill: drv::CUfunction,
    f_random: drv::CUfunction,
    f_add8: drv::CUfunction,
    f_add: drv::CUfunction,
    f_act: drv::CUfunction,
    f_act8: drv::CUfunction,
    f_sleep: drv::CUfunction,
    f_gate: drv::CUfunction,
    sms: u32,
}

/// Measured times of one run, seconds from the run's start on each span's device.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub spans: Vec<(f64, f64)>,
    /// From the first start to the last end over all spans.
    pub wall: f64,
    /// The start gate opened by its timeout, not by the host: issuing the steps took
    /// longer than [`GATE_TIMEOUT`] (or the launch queue filled), so the first steps may
    /// have run while later ones were still being issued.
    pub gate_timed_out: bool,
}

/// How long the start gate holds the GPUs before opening on its own.
pub const GATE_TIMEOUT: Duration = Duration::from_millis(500);

/// A program loaded on its devices: buffers allocated, streams, events and cuBLAS handles
/// made. Drop frees everything.
pub struct Loaded {
    devs: Vec<Dev>,
    program: Program,
    bufs: Vec<drv::CUdeviceptr>,
    streams: Vec<drv::CUstream>,
    handles: Vec<Option<cublas::cublasHandle_t>>,
    events: Vec<drv::CUevent>,
    marks: Vec<(drv::CUevent, drv::CUevent)>,
    /// Per span: the span whose end event is also its start (`Program::shared_boundaries`).
    starts_at: Vec<Option<u32>>,
    /// Per sync event: the span whose end event it is (`Program::shared_boundaries`).
    event_is_end: Vec<Option<u32>>,
    t0: Vec<drv::CUevent>,
    /// One event per stream, recorded after the last step: the watchdog polls them.
    fences: Vec<drv::CUevent>,
    comms: Vec<ncs::ncclComm_t>,
    watchdog: Option<Duration>,
    /// Set when the watchdog fired: GPU work may still be running, so nothing is
    /// synchronised or freed again.
    stopped: Cell<bool>,
    local: Option<Local>,
    /// One element for the start barrier of a multi-process run.
    barrier: drv::CUdeviceptr,
    /// The start gate: two words of mapped, pinned host memory ([open, timed out]),
    /// allocated in `build` (null only if building failed before).
    gate: *mut u32,
}

const POISON: u16 = 0x7fc0;

impl Loaded {
    /// Check the program, compile the kernels, allocate and set up everything.
    pub fn new(program: Program) -> Result<Loaded> {
        Loaded::build(program, None)
    }

    /// One rank of a multi-process program (see [`Local`]): joins the communicator with
    /// `ncclCommInitRank`, which blocks until every rank has joined.
    pub fn new_local(program: Program, local: Local) -> Result<Loaded> {
        if program.nccl.len() != local.world as usize || local.rank >= local.world {
            return Err(CudaError::Program(format!(
                "rank {} of {}: the program has {} NCCL ranks",
                local.rank,
                local.world,
                program.nccl.len()
            )));
        }
        if program.nccl.iter().enumerate().any(|(r, &d)| d != r as u32) {
            return Err(CudaError::Program(
                "a multi-process program must put NCCL rank r on device r".into(),
            ));
        }
        // Events cannot cross processes: every wait of this rank must be on an event
        // this rank records.
        let mut recorded = vec![false; program.events as usize];
        for (i, st) in program.steps.iter().enumerate() {
            let dev = |s: u32| program.streams.get(s as usize).copied();
            match *st {
                Step::Record { stream, event } if dev(stream) == Some(local.rank) => {
                    if let Some(r) = recorded.get_mut(event as usize) {
                        *r = true;
                    }
                }
                Step::Wait { stream, event }
                    if dev(stream) == Some(local.rank)
                        && !recorded.get(event as usize).copied().unwrap_or(false) =>
                {
                    return Err(CudaError::Program(format!(
                        "step {i}: rank {} waits for event {event}, which it never recorded \
                         (events cannot cross processes)",
                        local.rank
                    )));
                }
                _ => {}
            }
        }
        Loaded::build(program, Some(local))
    }

    /// Whether the program's device `d` is run by this process.
    fn is_local(&self, d: u32) -> bool {
        self.local.is_none_or(|l| l.rank == d)
    }

    fn comm(&self, rank: u32) -> ncs::ncclComm_t {
        if self.local.is_some() {
            self.comms[0]
        } else {
            self.comms[rank as usize]
        }
    }

    fn build(program: Program, local: Option<Local>) -> Result<Loaded> {
        let infos = probe()?;
        let need = program.devices();
        let have = infos.len() as u32;
        match local {
            Some(l) if l.device >= have => {
                return Err(CudaError::TooFewGpus {
                    need: l.device + 1,
                    have,
                });
            }
            None if need > have => return Err(CudaError::TooFewGpus { need, have }),
            _ => {}
        }
        check(&program)?;
        let ptx =
            cudarc::nvrtc::compile_ptx(KERNELS).map_err(|e| CudaError::Nvrtc(format!("{e:?}")))?;
        let image = CString::new(ptx.to_src()).map_err(|e| CudaError::Nvrtc(e.to_string()))?;
        let mut l = Loaded {
            devs: Vec::new(),
            program,
            bufs: Vec::new(),
            streams: Vec::new(),
            handles: Vec::new(),
            events: Vec::new(),
            marks: Vec::new(),
            starts_at: Vec::new(),
            event_is_end: Vec::new(),
            t0: Vec::new(),
            fences: Vec::new(),
            comms: Vec::new(),
            watchdog: None,
            stopped: Cell::new(false),
            local,
            barrier: 0,
            gate: std::ptr::null_mut(),
        };
        // A multi-process rank maps every program device onto its one local GPU (only its
        // own device's steps run).
        let phys = |d: u32| local.map_or(d, |l| l.device);
        for d in 0..need.max(1) {
            // SAFETY: plain driver calls on a device that exists; handles are kept in
            // `l` and released in Drop.
            unsafe {
                let dev = cu::device::get(phys(d) as i32).map_err(drv_err("cuDeviceGet"))?;
                let ctx =
                    cu::primary_ctx::retain(dev).map_err(drv_err("cuDevicePrimaryCtxRetain"))?;
                cu::ctx::set_current(ctx).map_err(drv_err("cuCtxSetCurrent"))?;
                let module = cu::module::load_data(image.as_ptr() as *const c_void)
                    .map_err(drv_err("cuModuleLoadData"))?;
                let f = |n: &str| {
                    cu::module::get_function(module, CString::new(n).unwrap())
                        .map_err(drv_err("cuModuleGetFunction"))
                };
                l.devs.push(Dev {
                    ctx,
                    module,
                    f_fill: f("fill_u16")?,
                    f_random: f("fill_random")?,
                    f_add8: f("add_v8")?,
                    f_add: f("add_u16")?,
                    f_act: f("act_u16")?,
                    f_act8: f("act_v8")?,
                    f_sleep: f("sleep_ns")?,
                    f_gate: f("gate_wait")?,
                    sms: infos[phys(d) as usize].sm_count,
                });
                l.t0.push(event()?);
            }
        }
        for b in &l.program.buffers {
            if !l.is_local(b.device) {
                l.bufs.push(0);
                continue;
            }
            l.bind(b.device)?;
            let bytes = (b.elems.max(1) * 2) as usize;
            // SAFETY: a plain allocation, freed in Drop.
            let p = unsafe { cu::malloc_sync(bytes) }.map_err(|e| CudaError::Driver {
                call: "cuMemAlloc",
                msg: format!("{e:?} allocating {bytes} B"),
            })?;
            l.bufs.push(p);
        }
        for i in 0..l.program.streams.len() {
            l.handles.push(None);
            if !l.is_local(l.program.streams[i]) {
                l.streams.push(std::ptr::null_mut());
                l.fences.push(std::ptr::null_mut());
                continue;
            }
            l.bind(l.program.streams[i])?;
            let s = cu::stream::create(cu::stream::StreamKind::NonBlocking)
                .map_err(drv_err("cuStreamCreate"))?;
            l.streams.push(s);
            l.fences.push(event()?);
        }
        for step in &l.program.steps {
            if let Step::Launch {
                stream,
                kernel: Kernel::Gemm { .. },
            } = *step
            {
                let s = stream as usize;
                if l.handles[s].is_none() && l.is_local(l.program.streams[s]) {
                    l.bind(l.program.streams[s])?;
                    let mut h = std::ptr::null_mut();
                    // SAFETY: out-pointer to a handle, destroyed in Drop.
                    blas("cublasCreate", unsafe { cublas::cublasCreate_v2(&mut h) })?;
                    blas("cublasSetStream", unsafe {
                        cublas::cublasSetStream_v2(h, l.streams[s] as _)
                    })?;
                    l.handles[s] = Some(h);
                }
            }
        }
        // An event is recorded on streams of one device only, and must be made in that
        // device's context (a record on another context's stream fails): each span's and
        // sync event's device is that of the stream that first marks or records it.
        (l.starts_at, l.event_is_end) = shared_events(&l.program);
        let (mut span_dev, mut event_dev) = (
            vec![None; l.program.spans as usize],
            vec![None; l.program.events as usize],
        );
        for st in &l.program.steps {
            let (slot, stream) = match *st {
                Step::Mark { stream, span, .. } => (span_dev.get_mut(span as usize), stream),
                Step::Record { stream, event } => (event_dev.get_mut(event as usize), stream),
                _ => continue,
            };
            if let Some(d @ None) = slot {
                *d = Some(l.program.streams[stream as usize]);
            }
        }
        for (i, dev) in span_dev.into_iter().enumerate() {
            if let Some(d) = dev.filter(|&d| l.is_local(d)) {
                l.bind(d)?;
            }
            let end = event()?;
            let start = match l.starts_at[i] {
                Some(a) => l.marks[a as usize].1,
                None => event()?,
            };
            l.marks.push((start, end));
        }
        for (e, dev) in event_dev.into_iter().enumerate() {
            if let Some(d) = dev.filter(|&d| l.is_local(d)) {
                l.bind(d)?;
            }
            let ev = match l.event_is_end[e] {
                Some(span) => l.marks[span as usize].1,
                None => event()?,
            };
            l.events.push(ev);
        }
        // SAFETY: 8 bytes of pinned host memory, mapped into every context (portable),
        // freed in Drop; written only through volatile accesses.
        unsafe {
            let flags = drv::CU_MEMHOSTALLOC_DEVICEMAP | drv::CU_MEMHOSTALLOC_PORTABLE;
            let p = cu::malloc_host(8, flags).map_err(drv_err("cuMemHostAlloc"))?;
            l.gate = p as *mut u32;
            std::ptr::write_volatile(l.gate, 1);
            std::ptr::write_volatile(l.gate.add(1), 0);
        }
        if let Some(lc) = local {
            probe_nccl()?;
            l.bind(lc.rank)?;
            // SAFETY: an 8-byte allocation, freed in Drop.
            l.barrier = unsafe { cu::malloc_sync(8) }.map_err(drv_err("cuMemAlloc"))?;
            let mut id = ncs::ncclUniqueId { internal: [0; 128] };
            for (d, s) in id.internal.iter_mut().zip(lc.id) {
                *d = s as _;
            }
            let mut comm = std::ptr::null_mut();
            // SAFETY: out-pointer to one communicator, destroyed or aborted in Drop.
            unsafe { nc::comm_init_rank(&mut comm, lc.world as i32, id, lc.rank as i32) }
                .map_err(|e| nccl_err("ncclCommInitRank", e))?;
            l.comms = vec![comm];
        } else if !l.program.nccl.is_empty() {
            probe_nccl()?;
            let devs: Vec<i32> = l.program.nccl.iter().map(|&d| d as i32).collect();
            let mut comms = vec![std::ptr::null_mut(); devs.len()];
            // SAFETY: `comms` has one slot per device; the communicators are destroyed
            // (or aborted) in Drop.
            unsafe { nc::comm_init_all(comms.as_mut_ptr(), devs.len() as i32, devs.as_ptr()) }
                .map_err(|e| nccl_err("ncclCommInitAll", e))?;
            l.comms = comms;
        }
        Ok(l)
    }

    /// Bound every later [`Loaded::run`] by `limit` of wall time (`None`: wait forever).
    pub fn set_watchdog(&mut self, limit: Option<Duration>) {
        self.watchdog = limit;
    }

    pub fn program(&self) -> &Program {
        &self.program
    }

    fn bind(&self, device: u32) -> Result<()> {
        // SAFETY: the context was retained in `new`.
        unsafe { cu::ctx::set_current(self.devs[device as usize].ctx) }
            .map_err(drv_err("cuCtxSetCurrent"))
    }

    fn ptr(&self, p: Ptr) -> drv::CUdeviceptr {
        self.bufs[p.buf as usize] + p.offset * 2
    }

    fn launch(
        &self,
        dev: u32,
        f: drv::CUfunction,
        n: u64,
        stream: drv::CUstream,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let sms = self.devs[dev as usize].sms.max(1) as u64;
        let blocks = n.div_ceil(256).clamp(1, sms * 16) as u32;
        // SAFETY: `f` comes from our module; `params` point at live locals of the caller
        // whose types match the kernel's signature.
        unsafe { cu::launch_kernel(f, (blocks, 1, 1), (256, 1, 1), 0, stream, params) }
            .map_err(drv_err("cuLaunchKernel"))
    }

    /// Fill every buffer as its `Init` says (poison, random data), then synchronise.
    pub fn initialise(&self) -> Result<()> {
        for (i, b) in self.program.buffers.iter().enumerate() {
            if !self.is_local(b.device) {
                continue;
            }
            self.bind(b.device)?;
            let s = std::ptr::null_mut();
            let mut p = self.bufs[i];
            let mut n = b.elems;
            let mut v = POISON;
            let d = &self.devs[b.device as usize];
            self.launch(
                b.device,
                d.f_fill,
                n,
                s,
                &mut [ptr_of(&mut p), ptr_of(&mut n), ptr_of(&mut v)],
            )?;
            if let Init::Random {
                key,
                offset,
                len,
                index0,
                runs,
                stride,
            } = b.init
            {
                let end = runs
                    .checked_sub(1)
                    .and_then(|r| r.checked_mul(stride))
                    .and_then(|x| x.checked_add(offset))
                    .and_then(|x| x.checked_add(len));
                if end.is_none_or(|e| e > b.elems) {
                    return Err(CudaError::Program(format!(
                        "buffer {i}: random range past its end"
                    )));
                }
                for j in 0..runs {
                    let (mut p, mut n, mut key, mut i0) =
                        (p + (offset + j * stride) * 2, len, key, index0 + j * len);
                    self.launch(
                        b.device,
                        d.f_random,
                        n,
                        s,
                        &mut [
                            ptr_of(&mut p),
                            ptr_of(&mut n),
                            ptr_of(&mut key),
                            ptr_of(&mut i0),
                        ],
                    )?;
                }
            }
        }
        self.sync()
    }

    fn sync(&self) -> Result<()> {
        for d in 0..self.devs.len() {
            if !self.is_local(d as u32) {
                continue;
            }
            self.bind(d as u32)?;
            cu::ctx::synchronize().map_err(drv_err("cuCtxSynchronize"))?;
        }
        Ok(())
    }

    /// Issue every step once and wait for the end; returns each span's times.
    pub fn run(&self) -> Result<Measured> {
        self.run_range(0..self.program.steps.len())
    }

    /// Issue only `steps` (a range of the program's steps that is a valid program on its
    /// own: each of its spans marked twice, each wait after its record) and wait for the
    /// end. Spans outside the range come back as NaN.
    pub fn run_range(&self, steps: std::ops::Range<usize>) -> Result<Measured> {
        self.run_gated(steps, |_| {})
    }

    /// [`Loaded::run_range`], calling `issued` after the last step is issued and before
    /// the start gate opens.
    fn run_gated(
        &self,
        steps: std::ops::Range<usize>,
        issued: impl FnOnce(&Self),
    ) -> Result<Measured> {
        if steps.end > self.program.steps.len() || steps.start > steps.end {
            return Err(CudaError::Program(format!(
                "steps {steps:?} outside the program's {}",
                self.program.steps.len()
            )));
        }
        let mut inside = vec![false; self.marks.len()];
        for st in &self.program.steps[steps.clone()] {
            if let Step::Mark { span, .. } = *st {
                inside[span as usize] = true;
            }
        }
        if self.stopped.get() {
            return Err(CudaError::Stopped);
        }
        // The start gate holds each device's first stream until every step is issued, so
        // the GPUs run the program at their own pace, not at the rate one host thread
        // issues it (a few µs a step: a schedule of many small ops would otherwise be
        // launch-bound, and an op issued late would start late). Every stream waits for
        // its device's start event, recorded after the gate, so nothing runs before t0.
        // Ranks in other processes start together behind a one-element all-reduce.
        let gate = Gate::close(self.gate);
        for (d, &t0) in self.t0.iter().enumerate() {
            if !self.is_local(d as u32) {
                continue;
            }
            self.bind(d as u32)?;
            let first = self.program.streams.iter().position(|&x| x as usize == d);
            let Some(first) = first else { continue };
            self.launch_gate(d, self.streams[first])?;
            if self.local.is_some() {
                // SAFETY: the barrier element and the communicator live as long as self.
                unsafe {
                    nc::all_reduce(
                        self.barrier as *const c_void,
                        self.barrier as *mut c_void,
                        1,
                        ncs::ncclDataType_t::ncclFloat32,
                        ncs::ncclRedOp_t::ncclSum,
                        self.comms[0],
                        self.streams[first] as ncs::cudaStream_t,
                    )
                }
                .map_err(|e| nccl_err("ncclAllReduce", e))?;
            }
            for st in &self.program.preamble {
                if let Step::Launch { stream, kernel } = *st
                    && stream as usize == first
                {
                    self.kernel(stream, kernel)?;
                }
            }
            self.bind(d as u32)?;
            // SAFETY (here and in the steps below): events, streams and contexts were
            // made in `new` and live as long as `self`.
            unsafe { cu::event::record(t0, self.streams[first]) }
                .map_err(drv_err("cuEventRecord"))?;
            for (s, &sd) in self.program.streams.iter().enumerate() {
                if sd as usize == d && s != first {
                    unsafe {
                        cu::stream::wait_event(
                            self.streams[s],
                            t0,
                            drv::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                        )
                    }
                    .map_err(drv_err("cuStreamWaitEvent"))?;
                }
            }
        }
        let here = |stream: u32| self.is_local(self.program.streams[stream as usize]);
        // Spans whose end was marked in this run (a shared start is recorded with it).
        let mut ended = vec![false; self.marks.len()];
        for step in &self.program.steps[steps] {
            match *step {
                Step::Record { stream, .. }
                | Step::Wait { stream, .. }
                | Step::Mark { stream, .. }
                | Step::Launch { stream, .. }
                    if !here(stream) => {}
                Step::Record { event, .. }
                    if self.event_is_end[event as usize].is_some_and(|s| ended[s as usize]) => {}
                Step::Record { stream, event } => {
                    self.bind(self.program.streams[stream as usize])?;
                    unsafe {
                        cu::event::record(
                            self.events[event as usize],
                            self.streams[stream as usize],
                        )
                    }
                    .map_err(drv_err("cuEventRecord"))?;
                }
                Step::Wait { stream, event } => {
                    self.bind(self.program.streams[stream as usize])?;
                    unsafe {
                        cu::stream::wait_event(
                            self.streams[stream as usize],
                            self.events[event as usize],
                            drv::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                        )
                    }
                    .map_err(drv_err("cuStreamWaitEvent"))?;
                }
                Step::Mark {
                    span, end: false, ..
                } if self.starts_at[span as usize].is_some_and(|a| ended[a as usize]) => {}
                Step::Mark { stream, span, end } => {
                    ended[span as usize] |= end;
                    self.bind(self.program.streams[stream as usize])?;
                    let (a, b) = self.marks[span as usize];
                    unsafe {
                        cu::event::record(if end { b } else { a }, self.streams[stream as usize])
                    }
                    .map_err(drv_err("cuEventRecord"))?;
                }
                Step::Launch { stream, kernel } => self.kernel(stream, kernel)?,
                Step::Nccl {
                    from,
                    send_stream,
                    src,
                    to,
                    recv_stream,
                    dst,
                    elems,
                } => self.nccl_pair(from, send_stream, src, to, recv_stream, dst, elems)?,
            }
        }
        issued(self);
        drop(gate);
        self.finish()?;
        // SAFETY: the gate's second word, written by the gate kernels (finished now).
        let gate_timed_out = unsafe {
            let late = std::ptr::read_volatile(self.gate.add(1)) != 0;
            std::ptr::write_volatile(self.gate.add(1), 0);
            late
        };
        let mut spans = Vec::with_capacity(self.marks.len());
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        let span_dev = self.span_devices();
        for (i, &(a, b)) in self.marks.iter().enumerate() {
            if !self.is_local(span_dev[i]) || !inside[i] {
                spans.push((f64::NAN, f64::NAN));
                continue;
            }
            let t0 = self.t0[span_dev[i] as usize];
            let s = unsafe { cu::event::elapsed(t0, a) }.map_err(drv_err("cuEventElapsedTime"))?
                as f64
                * 1e-3;
            let e = unsafe { cu::event::elapsed(t0, b) }.map_err(drv_err("cuEventElapsedTime"))?
                as f64
                * 1e-3;
            lo = lo.min(s);
            hi = hi.max(e);
            spans.push((s, e));
        }
        Ok(Measured {
            spans,
            wall: if hi >= lo { hi - lo } else { 0.0 },
            gate_timed_out,
        })
    }

    /// In a multi-process run, bring every rank's spans to rank 0 (over NCCL); each span
    /// comes from the rank whose stream it is on. Other ranks get their own spans back.
    /// In one process this is `m.spans` as it is.
    pub fn gather(&self, m: &Measured) -> Result<Vec<(f64, f64)>> {
        let Some(lc) = self.local else {
            return Ok(m.spans.clone());
        };
        let n = m.spans.len();
        let host: Vec<f64> = m.spans.iter().flat_map(|&(a, b)| [a, b]).collect();
        if n == 0 || lc.world == 1 {
            return Ok(m.spans.clone());
        }
        self.bind(lc.rank)?;
        let bytes = 16 * n;
        let s = self.streams[self
            .program
            .streams
            .iter()
            .position(|&d| d == lc.rank)
            .ok_or_else(|| CudaError::Program(format!("rank {} has no stream", lc.rank)))?];
        let f64t = ncs::ncclDataType_t::ncclFloat64;
        // SAFETY: device buffers of `bytes` each, freed below after a synchronise; host
        // slices of 2n f64s.
        unsafe {
            let nbuf = if lc.rank == 0 { lc.world as usize } else { 1 };
            let mut bufs = Vec::with_capacity(nbuf);
            for _ in 0..nbuf {
                bufs.push(cu::malloc_sync(bytes).map_err(drv_err("cuMemAlloc"))?);
            }
            cu::memcpy_htod_sync(bufs[0], &host).map_err(drv_err("cuMemcpyHtoD"))?;
            nc::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
            let mut r = Ok(());
            if lc.rank == 0 {
                for (peer, &b) in bufs.iter().enumerate().skip(1) {
                    r = r.and(
                        nc::recv(
                            b as *mut c_void,
                            2 * n,
                            f64t,
                            peer as i32,
                            self.comms[0],
                            s as _,
                        )
                        .map(|_| ())
                        .map_err(|e| nccl_err("ncclRecv", e)),
                    );
                }
            } else {
                r = nc::send(
                    bufs[0] as *const c_void,
                    2 * n,
                    f64t,
                    0,
                    self.comms[0],
                    s as _,
                )
                .map(|_| ())
                .map_err(|e| nccl_err("ncclSend", e));
            }
            let ended = nc::group_end().map_err(|e| nccl_err("ncclGroupEnd", e));
            r.and(ended.map(|_| ()))?;
            self.finish()?;
            let mut out = m.spans.clone();
            if lc.rank == 0 {
                let mut v = vec![0f64; 2 * n];
                for &b in bufs.iter().skip(1) {
                    cu::memcpy_dtoh_sync(&mut v, b).map_err(drv_err("cuMemcpyDtoH"))?;
                    for (i, o) in out.iter_mut().enumerate() {
                        if o.0.is_nan() && !v[2 * i].is_nan() {
                            *o = (v[2 * i], v[2 * i + 1]);
                        }
                    }
                }
            }
            for b in bufs {
                let _ = cu::free_sync(b);
            }
            Ok(out)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn nccl_pair(
        &self,
        from: u32,
        send_stream: u32,
        src: Ptr,
        to: u32,
        recv_stream: u32,
        dst: Ptr,
        elems: u64,
    ) -> Result<()> {
        let bf16 = ncs::ncclDataType_t::ncclBfloat16;
        nc::group_start().map_err(|e| nccl_err("ncclGroupStart", e))?;
        // SAFETY: the regions were bounds-checked by `check`; the communicators and
        // streams live as long as `self`. The group is always closed.
        let issued = unsafe {
            let sent = if self.is_local(from) {
                nc::send(
                    self.ptr(src) as *const c_void,
                    elems as usize,
                    bf16,
                    to as i32,
                    self.comm(from),
                    self.streams[send_stream as usize] as ncs::cudaStream_t,
                )
                .map(|_| ())
                .map_err(|e| nccl_err("ncclSend", e))
            } else {
                Ok(())
            };
            sent.and_then(|_| {
                if !self.is_local(to) {
                    return Ok(());
                }
                nc::recv(
                    self.ptr(dst) as *mut c_void,
                    elems as usize,
                    bf16,
                    from as i32,
                    self.comm(to),
                    self.streams[recv_stream as usize] as ncs::cudaStream_t,
                )
                .map(|_| ())
                .map_err(|e| nccl_err("ncclRecv", e))
            })
        };
        let ended = nc::group_end().map_err(|e| nccl_err("ncclGroupEnd", e));
        issued.and(ended).map(|_| ())
    }

    /// Wait for every stream: a plain synchronise, or, under a watchdog, polling each
    /// stream's fence until the limit.
    fn finish(&self) -> Result<()> {
        let Some(limit) = self.watchdog else {
            return self.sync();
        };
        for (i, &f) in self.fences.iter().enumerate() {
            if f.is_null() {
                continue;
            }
            self.bind(self.program.streams[i])?;
            // SAFETY: event and stream made in `new`.
            unsafe { cu::event::record(f, self.streams[i]) }.map_err(drv_err("cuEventRecord"))?;
        }
        let t = Instant::now();
        let mut pause = Duration::from_micros(20);
        loop {
            let mut all = true;
            for &f in self.fences.iter().filter(|f| !f.is_null()) {
                if !self.done(f)? {
                    all = false;
                    break;
                }
            }
            if all {
                return Ok(());
            }
            if t.elapsed() > limit {
                return Err(self.stop(t.elapsed()));
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    fn done(&self, e: drv::CUevent) -> Result<bool> {
        // SAFETY: an event made in `new`.
        match unsafe { cu::event::query(e) } {
            Ok(()) => Ok(true),
            Err(cu::DriverError(drv::cudaError_enum::CUDA_ERROR_NOT_READY)) => Ok(false),
            Err(e) => Err(CudaError::Driver {
                call: "cuEventQuery",
                msg: format!("{e:?}"),
            }),
        }
    }

    /// The watchdog fired: find the span at fault, abort NCCL, and retire `self`.
    fn stop(&self, waited: Duration) -> CudaError {
        let streams = self.span_streams();
        let mut running = None;
        let mut first_unstarted = None;
        let span_dev = self.span_devices();
        for (i, &(a, b)) in self.marks.iter().enumerate() {
            if !self.is_local(span_dev[i]) {
                continue;
            }
            let started = self.done(a).unwrap_or(false);
            let ended = self.done(b).unwrap_or(false);
            if started && !ended && running.is_none() {
                running = Some(i as u32);
            }
            if !started && first_unstarted.is_none() {
                first_unstarted = Some(i as u32);
            }
        }
        for &c in &self.comms {
            // SAFETY: aborting a live communicator unblocks its kernels; it is not used
            // again (Drop skips it once `stopped` is set).
            let _ = unsafe { nc::comm_abort(c) };
        }
        self.stopped.set(true);
        let (span, started) = match (running, first_unstarted) {
            (Some(s), _) => (Some(s), true),
            (None, s) => (s, false),
        };
        CudaError::Hung {
            secs: waited.as_secs_f64(),
            span,
            stream: span.map(|s| streams[s as usize]),
            started,
        }
    }

    fn span_streams(&self) -> Vec<u32> {
        let mut d = vec![0u32; self.marks.len()];
        for step in &self.program.steps {
            if let Step::Mark { stream, span, .. } = *step {
                d[span as usize] = stream;
            }
        }
        d
    }

    fn span_devices(&self) -> Vec<u32> {
        let mut d = vec![0u32; self.marks.len()];
        for step in &self.program.steps {
            if let Step::Mark { stream, span, .. } = *step {
                d[span as usize] = self.program.streams[stream as usize];
            }
        }
        d
    }

    fn kernel(&self, stream: u32, k: Kernel) -> Result<()> {
        let dev = self.program.streams[stream as usize];
        self.bind(dev)?;
        let s = self.streams[stream as usize];
        let d = &self.devs[dev as usize];
        match k {
            Kernel::Gemm {
                a,
                b,
                c,
                m,
                n,
                k,
                batch,
                stride_a,
                stride_c,
            } => {
                let h = self.handles[stream as usize].ok_or_else(|| {
                    CudaError::Program("GEMM on a stream without a handle".into())
                })?;
                let (alpha, beta) = (1.0f32, 0.0f32);
                let int = |v: u64, what: &str| {
                    i32::try_from(v).map_err(|_| {
                        CudaError::Program(format!("GEMM {what} = {v} exceeds cuBLAS's int"))
                    })
                };
                // Row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: swap the operands.
                let status = unsafe {
                    cublas::cublasGemmStridedBatchedEx(
                        h,
                        cublas::cublasOperation_t::CUBLAS_OP_N,
                        cublas::cublasOperation_t::CUBLAS_OP_N,
                        int(n, "n")?,
                        int(m, "m")?,
                        int(k, "k")?,
                        &alpha as *const f32 as *const c_void,
                        self.ptr(b) as *const c_void,
                        cublas::cudaDataType::CUDA_R_16BF,
                        int(n, "n")?,
                        0,
                        self.ptr(a) as *const c_void,
                        cublas::cudaDataType::CUDA_R_16BF,
                        int(k, "k")?,
                        stride_a as i64,
                        &beta as *const f32 as *const c_void,
                        self.ptr(c) as *mut c_void,
                        cublas::cudaDataType::CUDA_R_16BF,
                        int(n, "n")?,
                        stride_c as i64,
                        batch.max(1) as i32,
                        cublas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                        cublas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                    )
                };
                blas("cublasGemmStridedBatchedEx", status)
            }
            Kernel::Add {
                out,
                x,
                y,
                block_elems,
                blocks,
                ctas,
            } => {
                let (mut po, mut px, mut py) =
                    (self.ptr(out.ptr), self.ptr(x.ptr), self.ptr(y.ptr));
                let (mut be, mut total) = (block_elems, block_elems * blocks.max(1) as u64);
                let (mut so, mut sx, mut sy) = (out.stride, x.stride, y.stride);
                let aligned = [po, px, py].iter().all(|p| p % 16 == 0)
                    && [be, so, sx, sy].iter().all(|v| v % 8 == 0);
                let (f, threads) = if aligned {
                    (d.f_add8, be / 8)
                } else {
                    (d.f_add, total)
                };
                let params = &mut [
                    ptr_of(&mut po),
                    ptr_of(&mut px),
                    ptr_of(&mut py),
                    ptr_of(&mut be),
                    ptr_of(&mut total),
                    ptr_of(&mut so),
                    ptr_of(&mut sx),
                    ptr_of(&mut sy),
                ];
                if ctas > 0 {
                    // SAFETY: as in `launch`.
                    unsafe { cu::launch_kernel(f, (ctas, 1, 1), (1024, 1, 1), 0, s, params) }
                        .map_err(drv_err("cuLaunchKernel"))
                } else {
                    self.launch(dev, f, threads, s, params)
                }
            }
            Kernel::Act {
                out,
                input,
                block_rows,
                blocks,
                cols,
                out_stride_rows,
                in_stride_rows,
                func,
                gated,
            } => {
                let (mut po, mut pi) = (self.ptr(out), self.ptr(input));
                let (mut br, mut tr, mut c) = (block_rows, block_rows * blocks.max(1) as u64, cols);
                let (mut so, mut si) = (out_stride_rows, in_stride_rows);
                let (mut f, mut g) = (func as i32, i32::from(gated));
                let aligned = po % 16 == 0 && pi % 16 == 0 && c % 8 == 0;
                let (kf, threads) = if aligned {
                    // One CTA (256 threads) per row; `launch` caps the grid.
                    (d.f_act8, tr * 256)
                } else {
                    (d.f_act, tr * c)
                };
                self.launch(
                    dev,
                    kf,
                    threads,
                    s,
                    &mut [
                        ptr_of(&mut po),
                        ptr_of(&mut pi),
                        ptr_of(&mut br),
                        ptr_of(&mut tr),
                        ptr_of(&mut c),
                        ptr_of(&mut so),
                        ptr_of(&mut si),
                        ptr_of(&mut f),
                        ptr_of(&mut g),
                    ],
                )
            }
            Kernel::Copy { dst, src, bytes } => {
                let (dd, sd) = (
                    self.program.buffers[dst.buf as usize].device,
                    self.program.buffers[src.buf as usize].device,
                );
                // SAFETY: both ranges were checked against their buffers in `check`.
                unsafe {
                    if dd == sd {
                        cu::memcpy_dtod_async(self.ptr(dst), self.ptr(src), bytes as usize, s)
                            .map_err(drv_err("cuMemcpyDtoDAsync"))
                    } else {
                        cu::memcpy_peer_async(
                            self.devs[dd as usize].ctx,
                            self.ptr(dst),
                            self.devs[sd as usize].ctx,
                            self.ptr(src),
                            bytes as usize,
                            s,
                        )
                        .map_err(drv_err("cuMemcpyPeerAsync"))
                    }
                }
            }
            Kernel::Sleep { ns } => {
                let mut ns = ns;
                // SAFETY: our module's kernel; one u64 parameter.
                unsafe {
                    cu::launch_kernel(
                        d.f_sleep,
                        (1, 1, 1),
                        (1, 1, 1),
                        0,
                        s,
                        &mut [ptr_of(&mut ns)],
                    )
                }
                .map_err(drv_err("cuLaunchKernel"))
            }
        }
    }

    /// Copy `len` elements of buffer `buf` from `offset` to the host (bf16 bits).
    pub fn read(&self, buf: u32, offset: u64, len: u64) -> Result<Vec<u16>> {
        let b = self
            .program
            .buffers
            .get(buf as usize)
            .ok_or_else(|| CudaError::Program(format!("no buffer {buf}")))?;
        if offset + len > b.elems {
            return Err(CudaError::Program(format!(
                "read past the end of buffer {buf}"
            )));
        }
        if !self.is_local(b.device) {
            return Err(CudaError::Program(format!(
                "buffer {buf} belongs to another process's rank"
            )));
        }
        self.bind(b.device)?;
        let mut host = vec![0u16; len as usize];
        // SAFETY: the range is inside the allocation; the host slice has `len` elements.
        unsafe { cu::memcpy_dtoh_sync(&mut host, self.bufs[buf as usize] + offset * 2) }
            .map_err(drv_err("cuMemcpyDtoH"))?;
        Ok(host)
    }
}

/// The start gate closed for one run; dropping it (after the last step is issued, or on
/// an error on the way) opens it.
struct Gate(*mut u32);

impl Gate {
    fn close(flag: *mut u32) -> Gate {
        // SAFETY: the gate's pinned words live as long as the `Loaded` that owns them;
        // no gate kernel runs between runs.
        unsafe {
            std::ptr::write_volatile(flag.add(1), 0);
            std::ptr::write_volatile(flag, 0);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Gate(flag)
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: as in `close`.
        unsafe { std::ptr::write_volatile(self.0, 1) };
    }
}

impl Loaded {
    /// Launch the gate kernel on `stream` of device `d` (bound).
    fn launch_gate(&self, d: usize, stream: drv::CUstream) -> Result<()> {
        let mut flag: drv::CUdeviceptr = 0;
        let mut timeout = GATE_TIMEOUT.as_nanos() as u64;
        // SAFETY: the gate is mapped pinned memory (portable: valid in every context);
        // the kernel takes a pointer and a u64.
        unsafe {
            drv::cuMemHostGetDevicePointer_v2(&mut flag, self.gate as *mut c_void, 0)
                .result()
                .map_err(drv_err("cuMemHostGetDevicePointer"))?;
            cu::launch_kernel(
                self.devs[d].f_gate,
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream,
                &mut [ptr_of(&mut flag), ptr_of(&mut timeout)],
            )
        }
        .map_err(drv_err("cuLaunchKernel"))
    }
}

fn ptr_of<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

fn event() -> Result<drv::CUevent> {
    cu::event::create(drv::CUevent_flags::CU_EVENT_DEFAULT).map_err(drv_err("cuEventCreate"))
}

impl Drop for Loaded {
    fn drop(&mut self) {
        // SAFETY: each handle was created in `new` and is released once; errors while
        // tearing down cannot be acted on.
        if self.stopped.get() {
            // GPU work may still be running (or hung): freeing its memory or handles
            // now could fault it, so everything is left to the process's exit.
            return;
        }
        unsafe {
            let _ = self.sync();
            for &c in &self.comms {
                let _ = nc::comm_destroy(c);
            }
            for h in self.handles.iter().flatten() {
                cublas::cublasDestroy_v2(*h);
            }
            for e in self
                .events
                .iter()
                .enumerate()
                .filter(|(i, _)| self.event_is_end[*i].is_none())
                .map(|(_, e)| e)
                .chain(&self.t0)
                .chain(&self.fences)
                .filter(|e| !e.is_null())
            {
                let _ = cu::event::destroy(*e);
            }
            for (i, (a, b)) in self.marks.iter().enumerate() {
                if self.starts_at[i].is_none() {
                    let _ = cu::event::destroy(*a);
                }
                let _ = cu::event::destroy(*b);
            }
            for (i, s) in self.streams.iter().enumerate() {
                if s.is_null() {
                    continue;
                }
                let _ = self.bind(self.program.streams[i]);
                let _ = cu::stream::destroy(*s);
            }
            for (i, p) in self.bufs.iter().enumerate() {
                if *p == 0 {
                    continue;
                }
                let _ = self.bind(self.program.buffers[i].device);
                let _ = cu::free_sync(*p);
            }
            if self.barrier != 0 {
                if let Some(l) = self.local {
                    let _ = self.bind(l.rank);
                }
                let _ = cu::free_sync(self.barrier);
            }
            if !self.gate.is_null() {
                let _ = cu::free_host(self.gate as *mut c_void);
            }
            for d in &self.devs {
                let _ = cu::ctx::set_current(d.ctx);
                let _ = cu::module::unload(d.module);
            }
        }
    }
}

/// With `p.shared_boundaries`, the marks and records that can share one event: per span,
/// the span whose end mark its start mark directly follows on the same stream; per sync
/// event, the span whose end mark its only record directly follows there (such a record
/// is transparent: a start mark after it still shares the end's event).
fn shared_events(p: &Program) -> (Vec<Option<u32>>, Vec<Option<u32>>) {
    let mut starts_at = vec![None; p.spans as usize];
    let mut event_is_end = vec![None; p.events as usize];
    if !p.shared_boundaries {
        return (starts_at, event_is_end);
    }
    let mut records = vec![0u32; p.events as usize];
    for st in &p.steps {
        if let Step::Record { event, .. } = *st
            && let Some(c) = records.get_mut(event as usize)
        {
            *c += 1;
        }
    }
    let mut last: Vec<Option<Step>> = vec![None; p.streams.len()];
    let end_of = |last: &[Option<Step>], stream: u32| match last.get(stream as usize) {
        Some(Some(Step::Mark {
            span, end: true, ..
        })) => Some(*span),
        _ => None,
    };
    for st in &p.steps {
        let stream = match *st {
            Step::Nccl {
                send_stream,
                recv_stream,
                ..
            } => {
                for s in [send_stream, recv_stream] {
                    if let Some(x) = last.get_mut(s as usize) {
                        *x = Some(*st);
                    }
                }
                continue;
            }
            Step::Record { stream, event } => {
                if let (Some(span), Some(1)) = (end_of(&last, stream), records.get(event as usize))
                {
                    event_is_end[event as usize] = Some(span);
                    continue;
                }
                stream
            }
            Step::Mark {
                stream,
                span,
                end: false,
            } => {
                if let (Some(a), Some(x)) =
                    (end_of(&last, stream), starts_at.get_mut(span as usize))
                {
                    *x = Some(a);
                }
                stream
            }
            Step::Wait { stream, .. } | Step::Mark { stream, .. } | Step::Launch { stream, .. } => {
                stream
            }
        };
        if let Some(x) = last.get_mut(stream as usize) {
            *x = Some(*st);
        }
    }
    (starts_at, event_is_end)
}

/// Bounds and index checks of a program, so that no step can touch memory outside its
/// buffers or name a stream, event or span that does not exist.
pub fn check(p: &Program) -> Result<()> {
    let bad = |m: String| Err(CudaError::Program(m));
    for (i, d) in p.nccl.iter().enumerate() {
        if p.nccl[..i].contains(d) {
            return bad(format!(
                "NCCL ranks {} and {i} are both on device {d} (NCCL needs one GPU per rank)",
                p.nccl.iter().position(|x| x == d).unwrap_or(0)
            ));
        }
    }
    let region = |ptr: Ptr, elems: u64, what: &str| -> Result<()> {
        let Some(b) = p.buffers.get(ptr.buf as usize) else {
            return bad(format!("{what}: buffer {} does not exist", ptr.buf));
        };
        match ptr.offset.checked_add(elems) {
            Some(end) if end <= b.elems => Ok(()),
            _ => bad(format!(
                "{what}: elements {}..+{elems} past the {} of buffer {}",
                ptr.offset, b.elems, ptr.buf
            )),
        }
    };
    let span = |ptr: Ptr, block: u64, blocks: u32, stride: u64, what: &str| {
        let n = blocks.max(1) as u64;
        region(
            ptr,
            (n - 1).saturating_mul(stride).saturating_add(block),
            what,
        )
    };
    for (i, st) in p.preamble.iter().enumerate() {
        let Step::Launch { stream, .. } = *st else {
            return bad(format!(
                "preamble step {i}: only kernel launches may run there"
            ));
        };
        let dev = p.streams.get(stream as usize);
        let first = dev.and_then(|d| p.streams.iter().position(|x| x == d));
        if first != Some(stream as usize) {
            return bad(format!(
                "preamble step {i}: stream {stream} is not the first stream of its device"
            ));
        }
    }
    // Preamble kernels are checked as steps numbered before the program's.
    for (i, st) in p.preamble.iter().chain(&p.steps).enumerate() {
        let stream = match *st {
            Step::Record { stream, event } | Step::Wait { stream, event } => {
                if event >= p.events {
                    return bad(format!("step {i}: event {event} does not exist"));
                }
                stream
            }
            Step::Mark { stream, span, .. } => {
                if span >= p.spans {
                    return bad(format!("step {i}: span {span} does not exist"));
                }
                stream
            }
            Step::Launch { stream, kernel } => {
                let w = format!("step {i}");
                match kernel {
                    Kernel::Gemm {
                        a,
                        b,
                        c,
                        m,
                        n,
                        k,
                        batch,
                        stride_a,
                        stride_c,
                    } => {
                        span(a, m * k, batch, stride_a, &w)?;
                        region(b, k * n, &w)?;
                        span(c, m * n, batch, stride_c, &w)?;
                    }
                    Kernel::Add {
                        out,
                        x,
                        y,
                        block_elems,
                        blocks,
                        ..
                    } => {
                        for o in [out, x, y] {
                            span(o.ptr, block_elems, blocks, o.stride, &w)?;
                        }
                    }
                    Kernel::Act {
                        out,
                        input,
                        block_rows,
                        blocks,
                        cols,
                        out_stride_rows,
                        in_stride_rows,
                        gated,
                        ..
                    } => {
                        let ic = if gated { 2 * cols } else { cols };
                        span(out, block_rows * cols, blocks, out_stride_rows * cols, &w)?;
                        span(input, block_rows * ic, blocks, in_stride_rows * ic, &w)?;
                    }
                    Kernel::Copy { dst, src, bytes } => {
                        if bytes % 2 != 0 {
                            return bad(format!("{w}: copy of an odd byte count"));
                        }
                        region(dst, bytes / 2, &w)?;
                        region(src, bytes / 2, &w)?;
                    }
                    Kernel::Sleep { .. } => {}
                }
                stream
            }
            Step::Nccl {
                from,
                send_stream,
                src,
                to,
                recv_stream,
                dst,
                elems,
            } => {
                let w = format!("step {i}");
                for (r, st, what) in [(from, send_stream, "send"), (to, recv_stream, "recv")] {
                    let Some(&dev) = p.nccl.get(r as usize) else {
                        return bad(format!("{w}: NCCL rank {r} does not exist"));
                    };
                    match p.streams.get(st as usize) {
                        Some(&sd) if sd == dev => {}
                        Some(&sd) => {
                            return bad(format!(
                                "{w}: {what} stream {st} is on device {sd}, NCCL rank {r} on {dev}"
                            ));
                        }
                        None => return bad(format!("{w}: stream {st} does not exist")),
                    }
                }
                region(src, elems, &w)?;
                region(dst, elems, &w)?;
                for (ptr, r) in [(src, from), (dst, to)] {
                    if p.buffers[ptr.buf as usize].device != p.nccl[r as usize] {
                        return bad(format!(
                            "{w}: buffer {} is not on NCCL rank {r}'s device",
                            ptr.buf
                        ));
                    }
                }
                send_stream
            }
        };
        if stream as usize >= p.streams.len() {
            return bad(format!("step {i}: stream {stream} does not exist"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_rejects_out_of_bounds_and_unknown_names() {
        let mut p = Program {
            buffers: vec![Buffer {
                device: 0,
                elems: 64,
                init: Init::Poison,
            }],
            streams: vec![0],
            events: 1,
            spans: 1,
            steps: vec![Step::Launch {
                stream: 0,
                kernel: Kernel::Copy {
                    dst: Ptr { buf: 0, offset: 0 },
                    src: Ptr { buf: 0, offset: 32 },
                    bytes: 64,
                },
            }],
            nccl: Vec::new(),
            preamble: Vec::new(),
            shared_boundaries: false,
        };
        assert!(check(&p).is_ok());
        p.steps[0] = Step::Launch {
            stream: 0,
            kernel: Kernel::Copy {
                dst: Ptr { buf: 0, offset: 0 },
                src: Ptr { buf: 0, offset: 33 },
                bytes: 64,
            },
        };
        assert!(check(&p).is_err());
        p.steps[0] = Step::Wait {
            stream: 0,
            event: 1,
        };
        assert!(check(&p).is_err());
        p.steps[0] = Step::Mark {
            stream: 1,
            span: 0,
            end: false,
        };
        assert!(check(&p).is_err());
        // The preamble: kernel launches on the first stream of a device, in bounds.
        p.steps.clear();
        let copy = |stream, offset| Step::Launch {
            stream,
            kernel: Kernel::Copy {
                dst: Ptr { buf: 0, offset: 0 },
                src: Ptr { buf: 0, offset },
                bytes: 64,
            },
        };
        p.streams = vec![0, 0];
        p.preamble = vec![copy(0, 32)];
        assert!(check(&p).is_ok());
        p.preamble = vec![copy(1, 32)];
        assert!(check(&p).is_err(), "second stream of the device");
        p.preamble = vec![copy(0, 33)];
        assert!(check(&p).is_err(), "out of bounds");
        p.preamble = vec![Step::Record {
            stream: 0,
            event: 0,
        }];
        assert!(check(&p).is_err(), "not a launch");
    }

    /// The preamble runs before every run, outside the timed spans: a 50 µs sleep there
    /// leaves a tiny span tiny.
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn the_preamble_runs_untimed_before_every_run() {
        if !gpu_or_skip() {
            return;
        }
        let p = Program {
            buffers: vec![],
            streams: vec![0, 0],
            events: 0,
            spans: 1,
            steps: vec![
                Step::Mark {
                    stream: 1,
                    span: 0,
                    end: false,
                },
                Step::Launch {
                    stream: 1,
                    kernel: Kernel::Sleep { ns: 1_000 },
                },
                Step::Mark {
                    stream: 1,
                    span: 0,
                    end: true,
                },
            ],
            nccl: Vec::new(),
            preamble: vec![Step::Launch {
                stream: 0,
                kernel: Kernel::Sleep { ns: 50_000 },
            }],
            shared_boundaries: false,
        };
        let l = Loaded::new(p).unwrap();
        l.initialise().unwrap();
        for _ in 0..3 {
            let t = std::time::Instant::now();
            let m = l.run().unwrap();
            let host = t.elapsed().as_secs_f64();
            let (s, e) = m.spans[0];
            assert!(e - s < 40e-6, "span {} s holds the preamble", e - s);
            assert!(host > 45e-6, "the preamble did not run ({host} s)");
        }
    }

    /// Runs only where a GPU is present; prints why it skips otherwise, and fails
    /// instead of skipping when `REQUIRE_GPU=1`.
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn add_kernel_adds_on_the_gpu() {
        if let Err(e) = probe() {
            assert!(
                std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
                "REQUIRE_GPU=1 but {e}"
            );
            eprintln!("skipped: {e}");
            return;
        }
        let n = 4096u64;
        let p = Program {
            buffers: vec![
                Buffer {
                    device: 0,
                    elems: n,
                    init: Init::random(1, n),
                },
                Buffer {
                    device: 0,
                    elems: n,
                    init: Init::random(2, n),
                },
                Buffer {
                    device: 0,
                    elems: n,
                    init: Init::Poison,
                },
            ],
            streams: vec![0],
            events: 0,
            spans: 1,
            steps: vec![
                Step::Mark {
                    stream: 0,
                    span: 0,
                    end: false,
                },
                Step::Launch {
                    stream: 0,
                    kernel: Kernel::Add {
                        out: Span2 {
                            ptr: Ptr { buf: 2, offset: 0 },
                            stride: n,
                        },
                        x: Span2 {
                            ptr: Ptr { buf: 0, offset: 0 },
                            stride: n,
                        },
                        y: Span2 {
                            ptr: Ptr { buf: 1, offset: 0 },
                            stride: n,
                        },
                        block_elems: n,
                        blocks: 1,
                        ctas: 0,
                    },
                },
                Step::Mark {
                    stream: 0,
                    span: 0,
                    end: true,
                },
            ],
            nccl: Vec::new(),
            preamble: Vec::new(),
            shared_boundaries: false,
        };
        // On the whole GPU and on 3 CTAs (a reduction beside GEMMs).
        for ctas in [0, 3] {
            let mut p = p.clone();
            if let Step::Launch {
                kernel: Kernel::Add { ctas: c, .. },
                ..
            } = &mut p.steps[1]
            {
                *c = ctas;
            }
            let l = Loaded::new(p).unwrap();
            l.initialise().unwrap();
            let m = l.run().unwrap();
            assert!(m.spans[0].1 >= m.spans[0].0);
            let out = l.read(2, 0, n).unwrap();
            for (i, &o) in out.iter().enumerate() {
                let want = f32_to_bf16(
                    bf16_to_f32(f32_to_bf16(random_value(1, i as u64)))
                        + bf16_to_f32(f32_to_bf16(random_value(2, i as u64))),
                );
                assert_eq!(o, want, "ctas {ctas}, element {i}");
            }
        }
    }

    fn gpu_or_skip() -> bool {
        match probe() {
            Ok(_) => true,
            Err(e) => {
                assert!(
                    std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
                    "REQUIRE_GPU=1 but {e}"
                );
                eprintln!("skipped: {e}");
                false
            }
        }
    }

    fn timed_sleep(ns: u64) -> Vec<Step> {
        vec![
            Step::Mark {
                stream: 0,
                span: 0,
                end: false,
            },
            Step::Launch {
                stream: 0,
                kernel: Kernel::Sleep { ns },
            },
            Step::Mark {
                stream: 0,
                span: 0,
                end: true,
            },
        ]
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn spans_time_a_known_sleep() {
        if !gpu_or_skip() {
            return;
        }
        let l = Loaded::new(Program {
            streams: vec![0],
            spans: 1,
            steps: timed_sleep(2_000_000),
            ..Default::default()
        })
        .unwrap();
        let m = l.run().unwrap();
        let d = m.spans[0].1 - m.spans[0].0;
        assert!((2e-3..0.5).contains(&d), "a 2 ms sleep measured {d} s");
    }

    /// Which marks and records share an event: a start right after an end on the same
    /// stream, a once-recorded event right after an end (and a start after that record);
    /// not across streams, not an event recorded twice, nothing without the flag.
    #[test]
    fn shared_events_pair_adjacent_marks_and_records() {
        let mark = |stream, span, end| Step::Mark { stream, span, end };
        let launch = |stream| Step::Launch {
            stream,
            kernel: Kernel::Sleep { ns: 1 },
        };
        let mut p = Program {
            streams: vec![0, 0],
            spans: 4,
            events: 2,
            shared_boundaries: true,
            steps: vec![
                mark(0, 0, false),
                launch(0),
                mark(0, 0, true),
                Step::Record {
                    stream: 0,
                    event: 0,
                },
                mark(0, 1, false),
                launch(0),
                mark(0, 1, true),
                Step::Record {
                    stream: 0,
                    event: 1,
                },
                Step::Wait {
                    stream: 1,
                    event: 0,
                },
                mark(1, 2, false),
                launch(1),
                mark(1, 2, true),
                Step::Record {
                    stream: 1,
                    event: 1,
                },
                mark(0, 3, false),
                launch(0),
                mark(0, 3, true),
            ],
            ..Default::default()
        };
        assert!(check(&p).is_ok());
        let (starts, events) = shared_events(&p);
        assert_eq!(starts, vec![None, Some(0), None, None]);
        assert_eq!(events, vec![Some(0), None]);
        p.shared_boundaries = false;
        assert_eq!(shared_events(&p), (vec![None; 4], vec![None; 2]));
    }

    /// With shared boundaries, a span that follows another on its stream starts at that
    /// one's end event (exactly); without, it starts at an event of its own, after it.
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn spans_that_follow_each_other_share_their_boundary_event() {
        if !gpu_or_skip() {
            return;
        }
        for shared in [true, false] {
            let mut steps = timed_sleep(20_000);
            steps.extend(timed_sleep(20_000).into_iter().map(|s| match s {
                Step::Mark { stream, end, .. } => Step::Mark {
                    stream,
                    span: 1,
                    end,
                },
                s => s,
            }));
            let p = Program {
                streams: vec![0],
                spans: 2,
                steps,
                shared_boundaries: shared,
                ..Default::default()
            };
            assert_eq!(shared_events(&p).0, vec![None, shared.then_some(0)]);
            let l = Loaded::new(p).unwrap();
            for _ in 0..2 {
                let m = l.run().unwrap();
                let (a, b) = (m.spans[0], m.spans[1]);
                assert!(a.1 - a.0 >= 20e-6 && b.1 - b.0 >= 20e-6, "{a:?} {b:?}");
                if shared {
                    assert_eq!(b.0, a.1);
                } else {
                    assert!(b.0 > a.1, "{a:?} {b:?}");
                }
            }
        }
    }

    /// Nothing runs before every step is issued: with the host held after issuing, the
    /// span's end has not happened; once the gate opens it does, and the gate did not
    /// open by its timeout.
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn the_start_gate_holds_the_gpu_until_every_step_is_issued() {
        if !gpu_or_skip() {
            return;
        }
        let l = Loaded::new(Program {
            streams: vec![0],
            spans: 1,
            steps: timed_sleep(1_000),
            ..Default::default()
        })
        .unwrap();
        let mut ran_early = None;
        let m = l
            .run_gated(0..3, |l| {
                std::thread::sleep(Duration::from_millis(20));
                ran_early = Some(l.done(l.marks[0].1).unwrap());
            })
            .unwrap();
        assert_eq!(
            ran_early,
            Some(false),
            "the span ended before the gate opened"
        );
        assert!(!m.gate_timed_out);
        let d = m.spans[0].1 - m.spans[0].0;
        assert!((1e-6..5e-3).contains(&d), "a 1 µs sleep measured {d} s");
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn watchdog_names_the_span_that_did_not_end() {
        if !gpu_or_skip() {
            return;
        }
        let mut steps = timed_sleep(1_500_000_000);
        // A second span behind it on the same stream never starts in time.
        steps.extend(timed_sleep(1_000).into_iter().map(|s| match s {
            Step::Mark { stream, end, .. } => Step::Mark {
                stream,
                span: 1,
                end,
            },
            s => s,
        }));
        let mut l = Loaded::new(Program {
            streams: vec![0],
            spans: 2,
            steps,
            ..Default::default()
        })
        .unwrap();
        l.set_watchdog(Some(Duration::from_millis(200)));
        match l.run() {
            Err(CudaError::Hung {
                span: Some(0),
                stream: Some(0),
                started: true,
                secs,
            }) => assert!(secs >= 0.2),
            other => panic!("expected the watchdog on span 0, got {other:?}"),
        }
        assert_eq!(l.run().unwrap_err(), CudaError::Stopped);
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn nccl_send_to_self_copies_the_region() {
        if !gpu_or_skip() {
            return;
        }
        if let Err(e) = probe_nccl() {
            assert!(
                std::env::var("REQUIRE_GPU").as_deref() != Ok("1"),
                "REQUIRE_GPU=1 but {e}"
            );
            eprintln!("skipped: {e}");
            return;
        }
        let n = 1u64 << 20;
        let buf = |init| Buffer {
            device: 0,
            elems: n,
            init,
        };
        let l = Loaded::new(Program {
            buffers: vec![buf(Init::random(9, n)), buf(Init::Poison)],
            streams: vec![0],
            spans: 1,
            steps: vec![
                Step::Mark {
                    stream: 0,
                    span: 0,
                    end: false,
                },
                Step::Nccl {
                    from: 0,
                    send_stream: 0,
                    src: Ptr { buf: 0, offset: 0 },
                    to: 0,
                    recv_stream: 0,
                    dst: Ptr { buf: 1, offset: 0 },
                    elems: n,
                },
                Step::Mark {
                    stream: 0,
                    span: 0,
                    end: true,
                },
            ],
            nccl: vec![0],
            ..Default::default()
        })
        .unwrap();
        l.initialise().unwrap();
        let m = l.run().unwrap();
        assert!(m.spans[0].1 > m.spans[0].0);
        assert_eq!(l.read(1, 0, n).unwrap(), l.read(0, 0, n).unwrap());
    }

    #[test]
    fn check_rejects_two_nccl_ranks_on_one_gpu_and_streams_elsewhere() {
        let mut p = Program {
            buffers: vec![Buffer {
                device: 0,
                elems: 8,
                init: Init::Poison,
            }],
            streams: vec![0, 1],
            nccl: vec![0, 0],
            ..Default::default()
        };
        assert!(
            check(&p)
                .unwrap_err()
                .to_string()
                .contains("both on device 0")
        );
        p.nccl = vec![0, 1];
        p.steps.push(Step::Nccl {
            from: 0,
            send_stream: 1,
            src: Ptr { buf: 0, offset: 0 },
            to: 1,
            recv_stream: 1,
            dst: Ptr { buf: 0, offset: 0 },
            elems: 8,
        });
        assert!(
            check(&p)
                .unwrap_err()
                .to_string()
                .contains("send stream 1 is on device 1")
        );
    }

    /// The vectorised activation and add kernels over strided blocks, against host
    /// arithmetic (the reference check uses the same kernels, so it cannot catch their
    /// bugs).
    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn random_runs_lay_consecutive_values_out_in_pieces() {
        if !gpu_or_skip() {
            return;
        }
        let init = Init::Random {
            key: 5,
            offset: 2,
            len: 4,
            index0: 10,
            runs: 3,
            stride: 10,
        };
        let l = Loaded::new(Program {
            buffers: vec![Buffer {
                device: 0,
                elems: 40,
                init,
            }],
            streams: vec![0],
            ..Default::default()
        })
        .unwrap();
        l.initialise().unwrap();
        let got = l.read(0, 0, 40).unwrap();
        for (e, &v) in got.iter().enumerate() {
            let e = e as u64;
            let (j, i) = ((e.saturating_sub(2)) / 10, (e.saturating_sub(2)) % 10);
            if e >= 2 && j < 3 && i < 4 {
                assert_eq!(
                    v,
                    f32_to_bf16(random_value(5, 10 + j * 4 + i)),
                    "element {e}"
                );
            } else {
                assert_eq!(v, POISON, "element {e}");
            }
        }
        // A run past the end is refused.
        let l = Loaded::new(Program {
            buffers: vec![Buffer {
                device: 0,
                elems: 25,
                init,
            }],
            streams: vec![0],
            ..Default::default()
        })
        .unwrap();
        assert!(l.initialise().is_err());
    }

    #[test]
    #[ignore = "needs an NVIDIA GPU: run with --include-ignored (scripts/device-*.sh do)"]
    fn strided_activation_and_add_match_the_host() {
        if !gpu_or_skip() {
            return;
        }
        let (rows, cols, blocks, stride) = (5u64, 64u64, 3u32, 7u64);
        let elems = (stride * blocks as u64 + rows) * cols + 64;
        let rnd = |key| Init::random(key, elems);
        let buf = |init| Buffer {
            device: 0,
            elems,
            init,
        };
        let span = |buf, stride| Span2 {
            ptr: Ptr { buf, offset: 8 },
            stride,
        };
        let mut steps = Vec::new();
        for (i, func) in [ActFn::Gelu, ActFn::Silu, ActFn::Relu]
            .into_iter()
            .enumerate()
        {
            steps.push(Step::Launch {
                stream: 0,
                kernel: Kernel::Act {
                    out: Ptr {
                        buf: 2 + i as u32,
                        offset: 0,
                    },
                    input: Ptr { buf: 0, offset: 0 },
                    block_rows: rows,
                    blocks,
                    cols,
                    out_stride_rows: rows,
                    in_stride_rows: stride,
                    func,
                    gated: false,
                },
            });
        }
        steps.push(Step::Launch {
            stream: 0,
            kernel: Kernel::Add {
                out: span(5, stride * cols),
                x: span(0, stride * cols),
                y: span(1, stride * cols),
                block_elems: rows * cols,
                blocks,
                ctas: 0,
            },
        });
        let l = Loaded::new(Program {
            buffers: vec![
                buf(rnd(21)),
                buf(rnd(22)),
                buf(Init::Poison),
                buf(Init::Poison),
                buf(Init::Poison),
                buf(Init::Poison),
            ],
            streams: vec![0],
            steps,
            ..Default::default()
        })
        .unwrap();
        l.initialise().unwrap();
        l.run().unwrap();
        let x = |key, i: u64| bf16_to_f32(f32_to_bf16(random_value(key, i)));
        let gelu = |g: f32| 0.5 * g * (1.0 + (0.797_884_6 * (g + 0.044715 * g * g * g)).tanh());
        let silu = |g: f32| g / (1.0 + (-g).exp());
        let relu = |g: f32| g.max(0.0);
        let fs: [&dyn Fn(f32) -> f32; 3] = [&gelu, &silu, &relu];
        for (i, f) in fs.iter().enumerate() {
            let out = l
                .read(2 + i as u32, 0, rows * cols * blocks as u64)
                .unwrap();
            for b in 0..blocks as u64 {
                for r in 0..rows {
                    for c in 0..cols {
                        let want = f(x(21, (b * stride + r) * cols + c));
                        let got = bf16_to_f32(out[((b * rows + r) * cols + c) as usize]);
                        assert!(
                            (got - want).abs() <= 1e-2 * want.abs() + 1e-3,
                            "act {i} block {b} row {r} col {c}: {got} vs {want}"
                        );
                    }
                }
            }
        }
        let out = l.read(5, 0, elems).unwrap();
        for b in 0..blocks as u64 {
            for e in 0..rows * cols {
                let at = 8 + b * stride * cols + e;
                let want = bf16_to_f32(f32_to_bf16(x(21, at) + x(22, at)));
                assert_eq!(
                    bf16_to_f32(out[at as usize]),
                    want,
                    "add block {b} elem {e}"
                );
            }
            // Between blocks nothing is written: still poison.
            let gap = 8 + b * stride * cols + rows * cols;
            assert!(bf16_to_f32(out[gap as usize]).is_nan());
        }
    }
}
