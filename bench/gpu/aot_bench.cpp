// Host time per call of Kiln's C++ wrapper for cuda (wrapper.cpp built into
// kiln.so by aot_loader.py), with no Python in the process: kiln_call is
// called N times back to back on one stream with no synchronisation inside,
// so the figure is the wrapper's own work per call (argument checks and
// launches); then the same call captured once into a CUDA graph and the graph
// launched N times. Inputs are zeros (valid indices for index inputs).
//
//   aot_bench CASE_DIR [N]     -> one JSON line
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(EXPR)                                                              \
    do {                                                                         \
        cudaError_t e = (EXPR);                                                  \
        if (e != cudaSuccess) {                                                  \
            std::fprintf(stderr, "%s: %s\n", #EXPR, cudaGetErrorString(e));      \
            return 1;                                                            \
        }                                                                        \
    } while (0)

typedef int (*InitFn)(const char*);
typedef int (*CallFn)(const void* const*, void* const*, void*);
typedef int (*CountFn)(void);
typedef int (*RankFn)(int);
typedef long long (*SizeFn)(int, int);
typedef const char* (*DtypeFn)(int);
typedef const char* (*ErrorFn)(void);

static size_t element_size(const char* dtype) {
    const std::string d = dtype;
    if (d == "float64" || d == "int64") return 8;
    if (d == "float32" || d == "int32") return 4;
    if (d == "float16" || d == "bfloat16") return 2;
    return 1;
}

static double seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: aot_bench CASE_DIR [N]\n");
        return 2;
    }
    const std::string dir = argv[1];
    const int n = argc > 2 ? std::atoi(argv[2]) : 2000;
    void* lib = dlopen((dir + "/kiln.so").c_str(), RTLD_NOW);
    if (lib == nullptr) {
        std::fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    auto sym = [&](const char* name) { return dlsym(lib, name); };
    auto init = reinterpret_cast<InitFn>(sym("kiln_init"));
    auto call = reinterpret_cast<CallFn>(sym("kiln_call"));
    auto last_error = reinterpret_cast<ErrorFn>(sym("kiln_last_error"));
    auto num_inputs = reinterpret_cast<CountFn>(sym("kiln_num_inputs"));
    auto num_outputs = reinterpret_cast<CountFn>(sym("kiln_num_outputs"));
    auto in_rank = reinterpret_cast<RankFn>(sym("kiln_input_rank"));
    auto in_size = reinterpret_cast<SizeFn>(sym("kiln_input_size"));
    auto in_dtype = reinterpret_cast<DtypeFn>(sym("kiln_input_dtype"));
    auto out_rank = reinterpret_cast<RankFn>(sym("kiln_output_rank"));
    auto out_size = reinterpret_cast<SizeFn>(sym("kiln_output_size"));
    auto out_dtype = reinterpret_cast<DtypeFn>(sym("kiln_output_dtype"));
    CHECK(cudaFree(nullptr));  // the primary context, current on this thread
    if (init(dir.c_str()) != 0) {
        std::fprintf(stderr, "kiln_init: %s\n", last_error());
        return 1;
    }
    std::vector<void*> ins(num_inputs()), outs(num_outputs());
    for (size_t i = 0; i < ins.size(); ++i) {
        size_t bytes = element_size(in_dtype(i));
        for (int d = 0; d < in_rank(i); ++d) bytes *= static_cast<size_t>(in_size(i, d));
        CHECK(cudaMalloc(&ins[i], bytes > 0 ? bytes : 1));
        CHECK(cudaMemset(ins[i], 0, bytes));
    }
    for (size_t i = 0; i < outs.size(); ++i) {
        size_t bytes = element_size(out_dtype(i));
        for (int d = 0; d < out_rank(i); ++d) bytes *= static_cast<size_t>(out_size(i, d));
        CHECK(cudaMalloc(&outs[i], bytes > 0 ? bytes : 1));
    }
    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int i = 0; i < 50; ++i) {
        if (call(ins.data(), outs.data(), stream) != 0) {
            std::fprintf(stderr, "kiln_call: %s\n", last_error());
            return 1;
        }
    }
    CHECK(cudaStreamSynchronize(stream));
    double t0 = seconds();
    for (int i = 0; i < n; ++i) call(ins.data(), outs.data(), stream);
    double t1 = seconds();
    CHECK(cudaStreamSynchronize(stream));
    double t2 = seconds();

    // A wrapper built with --cuda-graph replays its own graph in kiln_call:
    // the figures above are already its graph's, and it cannot be captured.
    using Flag = int (*)();
    Flag device_graphs = reinterpret_cast<Flag>(dlsym(lib, "kiln_device_graphs"));
    if (device_graphs != nullptr && device_graphs() == 1) {
        std::printf(
            "{\"host_us\": %.2f, \"total_us\": %.2f, \"graph_host_us\": -1, \"graph_total_us\": -1}\n",
            (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6);
        return 0;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    int status = call(ins.data(), outs.data(), stream);
    CHECK(cudaStreamEndCapture(stream, &graph));
    if (status != 0) {
        std::fprintf(stderr, "kiln_call under capture: %s\n", last_error());
        return 1;
    }
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int i = 0; i < 50; ++i) CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    double g0 = seconds();
    for (int i = 0; i < n; ++i) cudaGraphLaunch(exec, stream);
    double g1 = seconds();
    CHECK(cudaStreamSynchronize(stream));
    double g2 = seconds();
    std::printf(
        "{\"host_us\": %.2f, \"total_us\": %.2f, \"graph_host_us\": %.2f, \"graph_total_us\": %.2f}\n",
        (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6, (g1 - g0) / n * 1e6, (g2 - g0) / n * 1e6);
    return 0;
}
