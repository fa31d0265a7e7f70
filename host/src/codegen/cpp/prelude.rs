//! The C++ written once at the top of every generated `wrapper.cpp`, after the
//! plugin's `kernel_header`: half-precision conversions, NaN-propagating
//! maximum and minimum, integer division that never traps, and the blocked
//! matrix product that extern `mm`/`bmm` calls run.
//!
//! Plain text: no names from input files ever reach it.

/// Helpers every kernel may call.
pub const HELPERS: &str = r#"
// float16 / bfloat16 <-> float, round to nearest even (no external dependency).
static inline float kiln_bits_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t kiln_f_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
static inline float kiln_h2f(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0x1fu) return kiln_bits_f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
        return (sign != 0) ? -v : v;
    }
    return kiln_bits_f(sign | ((exp + 112u) << 23) | (man << 13));
}
static inline uint16_t kiln_f2h(float f) {
    const uint32_t u = kiln_f_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
    if (a < 0x38800000u) {
        // Subnormal or zero: let the FPU round |f| * 2^24 to an integer (nearest even).
        const float v = kiln_bits_f(a) * 16777216.0f;
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(v)));
    }
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}
static inline float kiln_bf2f(uint16_t h) { return kiln_bits_f(static_cast<uint32_t>(h) << 16); }
static inline uint16_t kiln_f2bf(float f) {
    const uint32_t u = kiln_f_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
    return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// maximum/minimum propagate NaN, as torch.maximum/torch.minimum do.
template <typename T> static inline T kiln_maximum(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a > b ? a : b;
}
template <typename T> static inline T kiln_minimum(T a, T b) {
    if (a != a) return a;
    if (b != b) return b;
    return a < b ? a : b;
}
template <typename T> static inline T kiln_sigmoid(T a) { return T(1) / (T(1) + std::exp(-a)); }
template <typename T> static inline T kiln_divtrunc(T a, T b) { return b == 0 ? T(0) : T(a / b); }
template <typename T> static inline T kiln_divfloor(T a, T b) {
    if (b == 0) return T(0);
    T q = T(a / b);
    if ((a % b != 0) && ((a < 0) != (b < 0))) q = T(q - 1);
    return q;
}
template <typename T> static inline bool kiln_isnan(T v) { return v != v; }

"#;

/// The blocked matrix product. `out[b, i, j] = sum_k a[b, i, k] * b[b, k, j]`
/// over strided operands (any strides: they are packed into contiguous
/// panels first), written contiguously. Tiles: `KILN_MC` rows of `a` by
/// `KILN_KC` of the shared dimension are packed per thread, `KILN_KC` by
/// `KILN_NC` of `b`; a 4-row by `KILN_NR`-column micro-kernel keeps its
/// accumulators in registers, and its inner loop runs over contiguous `j`,
/// which the compiler vectorises for the target's SIMD width.
pub const MATMUL: &str = r#"
#ifndef KILN_MC
#define KILN_MC 64
#endif
#ifndef KILN_KC
#define KILN_KC 256
#endif
#ifndef KILN_NC
#define KILN_NC 512
#endif
#define KILN_MR 4
#define KILN_NR 32

template <typename Acc>
static inline void kiln_mm_micro(int64_t kc, const Acc* ap, const Acc* bp, int64_t ldb,
                                 Acc* c, int64_t ldc) {
    Acc acc[KILN_MR][KILN_NR];
    for (int i = 0; i < KILN_MR; ++i)
        for (int j = 0; j < KILN_NR; ++j) acc[i][j] = c[i * ldc + j];
    for (int64_t k = 0; k < kc; ++k) {
        const Acc* brow = bp + k * ldb;
        for (int i = 0; i < KILN_MR; ++i) {
            const Acc av = ap[i * kc + k];
#pragma omp simd
            for (int j = 0; j < KILN_NR; ++j) acc[i][j] += av * brow[j];
        }
    }
    for (int i = 0; i < KILN_MR; ++i)
        for (int j = 0; j < KILN_NR; ++j) c[i * ldc + j] = acc[i][j];
}

// Load: converts one stored element to the accumulation type.
template <typename Acc, typename T, typename Load, typename Store>
static int kiln_mm(int64_t batch, int64_t M, int64_t N, int64_t K,
                   const T* a, int64_t a_off, int64_t a_sb, int64_t a_sm, int64_t a_sk,
                   const T* b, int64_t b_off, int64_t b_sb, int64_t b_sk, int64_t b_sn,
                   T* out, Load load, Store store) {
    if (batch <= 0 || M <= 0 || N <= 0) return 0;
    const int64_t mtiles = (M + KILN_MC - 1) / KILN_MC;
    const int64_t ntiles = (N + KILN_NC - 1) / KILN_NC;
    const int64_t tiles = batch * mtiles * ntiles;
    int failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        Acc* ap = static_cast<Acc*>(std::malloc(sizeof(Acc) * KILN_MC * KILN_KC));
        Acc* bp = static_cast<Acc*>(std::malloc(sizeof(Acc) * KILN_KC * KILN_NC));
        Acc* cp = static_cast<Acc*>(std::malloc(sizeof(Acc) * KILN_MC * KILN_NC));
        const bool ok = ap != nullptr && bp != nullptr && cp != nullptr;
        if (!ok) failed = 1;
        {
            // Every thread meets the work-sharing loop; one without scratch skips its tiles.
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < tiles; ++t) {
                if (!ok) continue;
                const int64_t bi = t / (mtiles * ntiles);
                const int64_t i0 = ((t / ntiles) % mtiles) * KILN_MC;
                const int64_t j0 = (t % ntiles) * KILN_NC;
                const int64_t mc = std::min<int64_t>(KILN_MC, M - i0);
                const int64_t nc = std::min<int64_t>(KILN_NC, N - j0);
                // Columns padded to a multiple of the micro-kernel's width.
                const int64_t ncp = (nc + KILN_NR - 1) / KILN_NR * KILN_NR;
                const int64_t mcp = (mc + KILN_MR - 1) / KILN_MR * KILN_MR;
                for (int64_t i = 0; i < mcp * ncp; ++i) cp[i] = Acc(0);
                for (int64_t k0 = 0; k0 < K; k0 += KILN_KC) {
                    const int64_t kc = std::min<int64_t>(KILN_KC, K - k0);
                    for (int64_t i = 0; i < mcp; ++i)
                        for (int64_t k = 0; k < kc; ++k)
                            ap[i * kc + k] = i < mc
                                ? load(a, a_off + bi * a_sb + (i0 + i) * a_sm + (k0 + k) * a_sk)
                                : Acc(0);
                    for (int64_t k = 0; k < kc; ++k) {
                        const int64_t base = b_off + bi * b_sb + (k0 + k) * b_sk;
                        for (int64_t j = 0; j < ncp; ++j)
                            bp[k * ncp + j] = j < nc ? load(b, base + (j0 + j) * b_sn) : Acc(0);
                    }
                    for (int64_t i = 0; i < mcp; i += KILN_MR)
                        for (int64_t j = 0; j < ncp; j += KILN_NR)
                            kiln_mm_micro<Acc>(kc, ap + i * kc, bp + j, ncp, cp + i * ncp + j, ncp);
                }
                for (int64_t i = 0; i < mc; ++i)
                    for (int64_t j = 0; j < nc; ++j)
                        store(out, (bi * M + i0 + i) * N + j0 + j, cp[i * ncp + j]);
            }
        }
        std::free(ap);
        std::free(bp);
        std::free(cp);
    }
    return failed;
}
"#;
