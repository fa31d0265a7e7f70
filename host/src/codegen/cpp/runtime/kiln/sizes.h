// Kiln's runtime: the checks of a library compiled for a range of sizes
// (`host compile --dynamic`), the cpu's `wrapper.cpp` or a Triton device's.
// `kiln_call_shaped` reads each size symbol from an input's dim and checks it
// against its range, then every input dim against its expression over the
// symbols; a refused call returns 4 and leaves the reason, per calling thread,
// for `kiln_last_error`.
#pragma once
#include <cstdint>
#include <cstdio>

static thread_local char kiln_size_text[640] = "";

// Size `got` of dim `dim` of input `input` (`name`) is outside `symbol`'s
// range lo..=hi.
static inline int kiln_size_out_of_range(int input, const char* name, int dim, int64_t got,
                                  const char* symbol, int64_t lo, int64_t hi) {
    std::snprintf(kiln_size_text, sizeof kiln_size_text,
                  "input %d (%s) has size %lld in dim %d, outside the range the library was "
                  "compiled for: %s from %lld to %lld; compile again with a range that holds it",
                  input, name, static_cast<long long>(got), dim, symbol,
                  static_cast<long long>(lo), static_cast<long long>(hi));
    return 4;
}

// Dim `dim` of input `input` (`name`) is `got` where the program's sizes need
// `want` (an expression over the symbols) = `value`.
static inline int kiln_size_mismatch(int input, const char* name, int dim, int64_t got,
                              const char* want, int64_t value) {
    std::snprintf(kiln_size_text, sizeof kiln_size_text,
                  "input %d (%s) has size %lld in dim %d, where the program needs %s = %lld "
                  "at this call's sizes",
                  input, name, static_cast<long long>(got), dim, want,
                  static_cast<long long>(value));
    return 4;
}

// `kiln_call` (or `kiln_run_host`), which takes no sizes, on a library compiled
// for a range of them.
static inline int kiln_sizes_needed(void) {
    std::snprintf(kiln_size_text, sizeof kiln_size_text,
                  "this library was compiled for a range of sizes: call kiln_call_shaped "
                  "(kiln_run_host_shaped for host memory) with each input's sizes first, and "
                  "kiln_output_shapes for the outputs' sizes");
    return 4;
}
