// Kiln's cpu runtime: KilnLanes, the per-lane accumulators of row
// reductions.
#pragma once
#include <cstring>

// A vector of L partial results of a row reduction, one per lane, that the
// compiler keeps in registers across a row loop (an array it keeps in memory:
// each step would wait on the last one's store). Each step takes the lanes'
// new values from an array the step's `omp simd` loop wrote; a float max or
// min also notes, per lane, whether it saw a NaN (KilnNans). After the row,
// `kiln_lanes_store` hands them to the pairwise combination. GCC and clang:
// their vector extensions; elsewhere plain arrays.
#if defined(__GNUC__) || defined(__clang__)
template <typename T, int L>
struct KilnLanes {
    typedef T V __attribute__((vector_size(sizeof(T) * L)));
    V v;
};
template <typename T, int L>
struct KilnNans {
    typedef typename KilnLanes<T, L>::V V;
    typedef decltype(V{} != V{}) M;
    M m;
};
// (Vectors pass by reference only: returned by value, they would change the
// ABI with the machine's vector width, which GCC warns of.)
template <typename T, int L>
static inline void kiln_lanes_load(typename KilnLanes<T, L>::V& t, const T* p) {
    std::memcpy(&t, p, sizeof(t));
}
template <typename T, int L>
static inline void kiln_lanes_fill(KilnLanes<T, L>& a, T x) {
    for (int l = 0; l < L; ++l) a.v[l] = x;
}
template <typename T, int L>
static inline void kiln_nans_none(KilnNans<T, L>& n) {
    n.m = typename KilnNans<T, L>::M{};
}
template <typename T, int L>
static inline void kiln_lanes_sum(KilnLanes<T, L>& a, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    a.v += t;
}
template <typename T, int L>
static inline void kiln_lanes_max(KilnLanes<T, L>& a, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    a.v = t > a.v ? t : a.v;
}
template <typename T, int L>
static inline void kiln_lanes_min(KilnLanes<T, L>& a, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    a.v = t < a.v ? t : a.v;
}
template <typename T, int L>
static inline void kiln_lanes_nans(KilnNans<T, L>& n, const T* p) {
    typename KilnLanes<T, L>::V t;
    kiln_lanes_load<T, L>(t, p);
    n.m |= t != t;
}
template <typename T, int L>
static inline void kiln_lanes_store(T* p, const KilnLanes<T, L>& a) { std::memcpy(p, &a.v, sizeof(a.v)); }
template <typename T, int L>
static inline void kiln_nans_store(int* p, const KilnNans<T, L>& n) {
    for (int l = 0; l < L; ++l) p[l] = n.m[l] != 0;
}
#else
template <typename T, int L>
struct KilnLanes {
    T v[L];
};
template <typename T, int L>
struct KilnNans {
    int m[L];
};
template <typename T, int L>
static inline void kiln_lanes_fill(KilnLanes<T, L>& a, T x) {
    for (int l = 0; l < L; ++l) a.v[l] = x;
}
template <typename T, int L>
static inline void kiln_nans_none(KilnNans<T, L>& n) {
    for (int l = 0; l < L; ++l) n.m[l] = 0;
}
template <typename T, int L>
static inline void kiln_lanes_sum(KilnLanes<T, L>& a, const T* p) { for (int l = 0; l < L; ++l) a.v[l] += p[l]; }
template <typename T, int L>
static inline void kiln_lanes_max(KilnLanes<T, L>& a, const T* p) {
    for (int l = 0; l < L; ++l) a.v[l] = p[l] > a.v[l] ? p[l] : a.v[l];
}
template <typename T, int L>
static inline void kiln_lanes_min(KilnLanes<T, L>& a, const T* p) {
    for (int l = 0; l < L; ++l) a.v[l] = p[l] < a.v[l] ? p[l] : a.v[l];
}
template <typename T, int L>
static inline void kiln_lanes_nans(KilnNans<T, L>& n, const T* p) {
    for (int l = 0; l < L; ++l) n.m[l] |= p[l] != p[l];
}
template <typename T, int L>
static inline void kiln_lanes_store(T* p, const KilnLanes<T, L>& a) { for (int l = 0; l < L; ++l) p[l] = a.v[l]; }
template <typename T, int L>
static inline void kiln_nans_store(int* p, const KilnNans<T, L>& n) { for (int l = 0; l < L; ++l) p[l] = n.m[l]; }
#endif
