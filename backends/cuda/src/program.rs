//! The device program: what the executor runs, in the order one host thread issues it.
//! Plain data; it knows nothing of strategies, plans or ranks beyond device ordinals.

/// Element offset into a buffer (elements are bf16, 2 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ptr {
    pub buf: u32,
    pub offset: u64,
}

/// How a buffer is filled before each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// Every element NaN (bf16 0x7FC0): an element no op writes stays NaN.
    Poison,
    /// `runs` runs of `len` elements, run j at element `offset + j·stride`, get
    /// `random(key, index0 + j·len + i)` (uniform in [−1, 1), see [`random_value`]): a
    /// tensor's consecutive elements laid out in pieces. The rest are poisoned.
    Random {
        key: u64,
        offset: u64,
        len: u64,
        index0: u64,
        runs: u64,
        stride: u64,
    },
}

impl Init {
    /// Elements `0 .. len` get `random(key, i)`.
    pub fn random(key: u64, len: u64) -> Init {
        Init::Random {
            key,
            offset: 0,
            len,
            index0: 0,
            runs: 1,
            stride: len,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Buffer {
    pub device: u32,
    pub elems: u64,
    pub init: Init,
}

/// Elementwise activation functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActFn {
    Relu = 0,
    Gelu = 1,
    Silu = 2,
}

impl Kernel {
    /// One row-major `C (m×n) = A (m×k) · B (k×n)` over whole buffers `a`, `b`, `c`.
    pub fn gemm(a: u32, b: u32, c: u32, m: u64, n: u64, k: u64) -> Kernel {
        let at = |buf| Ptr { buf, offset: 0 };
        Kernel::Gemm {
            a: at(a),
            b: at(b),
            c: at(c),
            m,
            n,
            k,
            batch: 1,
            stride_a: m * k,
            stride_c: m * n,
        }
    }
}

/// `blocks` runs of `block_elems` elements, `stride` elements apart, from `ptr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span2 {
    pub ptr: Ptr,
    pub stride: u64,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kernel {
    /// Row-major `C (m×n) = A (m×k) · B (k×n)`, `batch` times with A and C advancing by
    /// `stride_a` / `stride_c` elements (B shared): one cuBLAS strided-batched call.
    Gemm {
        a: Ptr,
        b: Ptr,
        c: Ptr,
        m: u64,
        n: u64,
        k: u64,
        batch: u32,
        stride_a: u64,
        stride_c: u64,
    },
    /// `out = x + y` over `blocks` runs of `block_elems` elements.
    Add {
        out: Span2,
        x: Span2,
        y: Span2,
        block_elems: u64,
        blocks: u32,
        /// Run on this many CTAs of 1024 threads (about one SM each), leaving the rest of
        /// the GPU to the kernels beside it (a reduction on a communication stream beside
        /// the GEMMs); 0: as many CTAs as fill the GPU.
        ctas: u32,
    },
    /// `out[r, c] = f(in[r, c])` (· `in[r, cols + c]` when gated) over `blocks` runs of
    /// `block_rows` rows; `out` rows have `cols` elements, `in` rows `cols` or `2·cols`;
    /// strides in rows.
    Act {
        out: Ptr,
        input: Ptr,
        block_rows: u64,
        blocks: u32,
        cols: u64,
        out_stride_rows: u64,
        in_stride_rows: u64,
        func: ActFn,
        gated: bool,
    },
    /// `bytes` from `src` to `dst` by the copy engine (a peer copy across devices).
    Copy { dst: Ptr, src: Ptr, bytes: u64 },
    /// Occupy one CTA for `ns` nanoseconds of GPU time (spins on the global timer):
    /// a known-length op for tests of timing and of the watchdog.
    Sleep { ns: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Record sync event `event` on `stream`.
    Record {
        stream: u32,
        event: u32,
    },
    /// Make `stream` wait for the last record of `event` (issued earlier).
    Wait {
        stream: u32,
        event: u32,
    },
    /// Timing: span `span` starts (`end = false`) or ends here on `stream`.
    Mark {
        stream: u32,
        span: u32,
        end: bool,
    },
    Launch {
        stream: u32,
        kernel: Kernel,
    },
    /// One NCCL point-to-point transfer of `elems` bf16 elements, issued as one group:
    /// NCCL rank `from` sends `src` on `send_stream`, rank `to` receives into `dst` on
    /// `recv_stream`. `from == to` is a send to self (NCCL's local copy through SMs).
    /// The streams must be on the ranks' devices ([`Program::nccl`]).
    Nccl {
        from: u32,
        send_stream: u32,
        src: Ptr,
        to: u32,
        recv_stream: u32,
        dst: Ptr,
        elems: u64,
    },
}

/// A program: buffers, streams (by device), sync events, and the steps in issue order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Program {
    pub buffers: Vec<Buffer>,
    /// Device of each stream.
    pub streams: Vec<u32>,
    pub events: u32,
    /// Timed spans (each marked once at its start and once at its end).
    pub spans: u32,
    pub steps: Vec<Step>,
    /// Device of each NCCL rank, in rank order (one communicator over them, made with
    /// `ncclCommInitAll`); empty when the program has no NCCL steps. Devices are distinct.
    pub nccl: Vec<u32>,
    /// Kernels issued at the start of every run, before its start event, each on the
    /// first stream of its device (`Step::Launch` only): untimed work that puts the GPU
    /// in a known state — a heater that brings the clocks to what sustained load gives
    /// them, an L2 flush — and keeps it busy while the host issues the run.
    pub preamble: Vec<Step>,
    /// Spans that follow each other on a stream share one event: when a span's start mark
    /// comes right after another span's end mark on the same stream (no step of that
    /// stream between), the end's event is the start's too and is recorded once. Each
    /// event record costs the stream time between kernels; a span's start then includes
    /// the gap from the previous op's end.
    pub shared_boundaries: bool,
}

impl Program {
    /// Highest device ordinal used, plus one.
    pub fn devices(&self) -> u32 {
        self.streams
            .iter()
            .chain(self.buffers.iter().map(|b| &b.device))
            .chain(self.nccl.iter())
            .max()
            .map_or(0, |d| d + 1)
    }
}

/// The value `Init::Random` writes at `index` for `key`: splitmix64 of the two, top 24
/// bits mapped to [−1, 1). Host code (reference checks) uses the same function.
pub fn random_value(key: u64, index: u64) -> f32 {
    let mut z = key ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 40) as f32) / 8_388_608.0 - 1.0
}

/// bf16 bits → f32.
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// f32 → bf16 bits, round to nearest even (NaN stays NaN).
pub fn f32_to_bf16(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return 0x7fc0;
    }
    let r = u.wrapping_add(0x7fff + ((u >> 16) & 1));
    (r >> 16) as u16
}

/// The kernels' source (CUDA C, compiled at start by NVRTC). `fill_random` must agree
/// with [`random_value`] and the conversions with [`f32_to_bf16`] / [`bf16_to_f32`].
pub const KERNELS: &str = r#"
typedef unsigned short u16;
typedef unsigned long long u64;
__device__ __forceinline__ float b2f(u16 v) { return __uint_as_float(((unsigned)v) << 16); }
__device__ __forceinline__ u16 f2b(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (u16)(u >> 16);
}
extern "C" __global__ void sleep_ns(u64 ns) {
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
// The start gate: one thread spins until the host opens it (flag[0] != 0), or until
// `timeout_ns` has passed, which it notes in flag[1].
extern "C" __global__ void gate_wait(volatile unsigned* flag, u64 timeout_ns) {
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (flag[0] == 0) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > timeout_ns) { flag[1] = 1; break; }
    }
}
extern "C" __global__ void fill_u16(u16* p, u64 n, u16 v) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) p[i] = v;
}
extern "C" __global__ void fill_random(u16* p, u64 n, u64 key, u64 index0) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        u64 z = key ^ ((index0 + i) * 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        p[i] = f2b((float)(z >> 40) / 8388608.0f - 1.0f);
    }
}
// out = x + y, eight elements (16 bytes) per access; block_elems % 8 == 0, all aligned.
extern "C" __global__ void add_v8(u16* out, const u16* x, const u16* y, u64 block_elems,
                                  u64 total, u64 so, u64 sx, u64 sy) {
    // Blocks outer, a grid-stride loop over each block's vectors inner: no 64-bit
    // division per element (which would cost more than the memory traffic).
    u64 stride = (u64)gridDim.x * blockDim.x * 8, nb = total / block_elems;
    for (u64 b = 0; b < nb; ++b) {
        const u16* xb = x + b * sx; const u16* yb = y + b * sy; u16* ob = out + b * so;
        for (u64 i = (blockIdx.x * (u64)blockDim.x + threadIdx.x) * 8; i < block_elems; i += stride) {
            uint4 a = *(const uint4*)(xb + i);
            uint4 c = *(const uint4*)(yb + i);
            unsigned* pa = (unsigned*)&a; unsigned* pc = (unsigned*)&c; uint4 r; unsigned* pr = (unsigned*)&r;
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                u16 lo = f2b(b2f((u16)(pa[j] & 0xffff)) + b2f((u16)(pc[j] & 0xffff)));
                u16 hi = f2b(b2f((u16)(pa[j] >> 16)) + b2f((u16)(pc[j] >> 16)));
                pr[j] = (unsigned)lo | ((unsigned)hi << 16);
            }
            *(uint4*)(ob + i) = r;
        }
    }
}
extern "C" __global__ void add_u16(u16* out, const u16* x, const u16* y, u64 block_elems,
                                   u64 total, u64 so, u64 sx, u64 sy) {
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < total; e += (u64)gridDim.x * blockDim.x) {
        u64 b = e / block_elems, i = e % block_elems;
        out[b * so + i] = f2b(b2f(x[b * sx + i]) + b2f(y[b * sy + i]));
    }
}
__device__ __forceinline__ float act(float g, int f) {
    if (f == 0) return g > 0.f ? g : 0.f;
    // Hardware approximations (one MUFU instruction each, ~2^-11 relative error, far
    // below bf16's 2^-8): an IEEE division or a tanh through exp made the kernel
    // ALU-bound at 1.4 TB/s, a third of the add kernel's bandwidth.
    if (f == 1) {
        float u = 0.7978845608f * (g + 0.044715f * g * g * g), t;
        asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
        return 0.5f * g * (1.f + t);
    }
    return __fdividef(g, 1.f + __expf(-g));
}
// Eight elements (16 bytes) per thread and access; cols % 8 == 0 and aligned rows.
extern "C" __global__ void act_v8(u16* out, const u16* in, u64 block_rows, u64 total_rows,
                                  u64 cols, u64 so, u64 si, int func, int gated) {
    // One row per CTA at a time (a grid-stride loop over rows), the row's 8-element
    // vectors over the threads: one division per row, none per element.
    u64 vcols = cols / 8, in_cols = gated ? 2 * cols : cols;
    for (u64 row = blockIdx.x; row < total_rows; row += gridDim.x) {
        u64 b = row / block_rows, rr = row - b * block_rows;
        const u16* ir = in + (b * si + rr) * in_cols;
        u16* orow = out + (b * so + rr) * cols;
        for (u64 v = threadIdx.x; v < vcols; v += blockDim.x) {
            u64 c = v * 8;
            uint4 g = *(const uint4*)(ir + c);
            uint4 up;
            if (gated) up = *(const uint4*)(ir + cols + c);
            unsigned* pg = (unsigned*)&g; unsigned* pu = (unsigned*)&up; uint4 r; unsigned* pr = (unsigned*)&r;
            #pragma unroll
            for (int j = 0; j < 4; ++j) {
                float lo = act(b2f((u16)(pg[j] & 0xffff)), func), hi = act(b2f((u16)(pg[j] >> 16)), func);
                if (gated) { lo *= b2f((u16)(pu[j] & 0xffff)); hi *= b2f((u16)(pu[j] >> 16)); }
                pr[j] = (unsigned)f2b(lo) | ((unsigned)f2b(hi) << 16);
            }
            *(uint4*)(orow + c) = r;
        }
    }
}
extern "C" __global__ void act_u16(u16* out, const u16* in, u64 block_rows, u64 total_rows,
                                   u64 cols, u64 so, u64 si, int func, int gated) {
    u64 total = total_rows * cols, in_cols = gated ? 2 * cols : cols;
    for (u64 e = blockIdx.x * (u64)blockDim.x + threadIdx.x; e < total; e += (u64)gridDim.x * blockDim.x) {
        u64 row = e / cols, c = e % cols, b = row / block_rows, rr = row % block_rows;
        const u16* ir = in + (b * si + rr) * in_cols;
        float v = act(b2f(ir[c]), func);
        if (gated) v *= b2f(ir[cols + c]);
        out[(b * so + rr) * cols + c] = f2b(v);
    }
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_round_trip_and_rounding() {
        for v in [0.0f32, 1.0, -2.5, 3.140625, 1e-3, -65504.0] {
            let b = f32_to_bf16(v);
            assert!((bf16_to_f32(b) - v).abs() <= v.abs() / 128.0, "{v}");
        }
        // Ties round to even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), f32_to_bf16(1.0));
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn random_values_are_in_range_and_spread() {
        let v: Vec<f32> = (0..10_000).map(|i| random_value(7, i)).collect();
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.05, "{mean}");
        assert_ne!(random_value(7, 1), random_value(8, 1));
    }
}
