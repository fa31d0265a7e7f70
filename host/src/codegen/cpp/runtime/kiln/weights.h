// Kiln's cpu runtime: kiln_read_weights, which reads a weights file
// (safetensors, as `host compile` writes weights.safetensors) into memory and
// finds every tensor the program needs by its key, checking its dtype and
// byte size; the reason of a failure is left in `kiln_error_text`. The header
// is searched, not fully parsed: each tensor's entry is an object without
// nested objects, and Kiln's keys are plain identifiers.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct KilnWeightSpec {
    const char* key;
    const char* dtype;
    uint64_t bytes;
};
static char kiln_error_text[768] = "";
static unsigned char* kiln_weights_file = nullptr;

static int kiln_weights_fail(const char* path, const char* what, const char* key) {
    std::snprintf(kiln_error_text, sizeof kiln_error_text,
                  "weights file %s: %s%s%s; keep the files `host compile` wrote together, or compile again",
                  path, what, key != nullptr ? " " : "", key != nullptr ? key : "");
    return 1;
}

static const char* kiln_json_blank(const char* p, const char* end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
    return p;
}

// The value after `"name":` at or after `from`, or nullptr.
static const char* kiln_json_field(const char* from, const char* end, const char* name) {
    const size_t n = std::strlen(name);
    for (const char* p = from; p + n + 2 <= end; ++p) {
        if (*p != '"' || std::memcmp(p + 1, name, n) != 0 || p[n + 1] != '"') continue;
        const char* q = kiln_json_blank(p + n + 2, end);
        if (q < end && *q == ':') return kiln_json_blank(q + 1, end);
    }
    return nullptr;
}

static bool kiln_json_uint(const char** at, const char* end, uint64_t* out) {
    const char* p = kiln_json_blank(*at, end);
    uint64_t v = 0;
    bool any = false;
    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + static_cast<uint64_t>(*p - '0');
        ++p;
        any = true;
    }
    *at = kiln_json_blank(p, end);
    *out = v;
    return any;
}

[[maybe_unused]] static int kiln_read_weights(const char* path, const KilnWeightSpec* specs, int n,
                                             const void** found) {
    std::FILE* f = std::fopen(path, "rb");
    if (f == nullptr) return kiln_weights_fail(path, std::strerror(errno), nullptr);
    long size = -1;
    if (std::fseek(f, 0, SEEK_END) == 0) size = std::ftell(f);
    if (size < 0 || std::fseek(f, 0, SEEK_SET) != 0) {
        std::fclose(f);
        return kiln_weights_fail(path, "cannot be read", nullptr);
    }
    unsigned char* bytes = static_cast<unsigned char*>(std::malloc(size > 0 ? static_cast<size_t>(size) : 1));
    if (bytes == nullptr) {
        std::fclose(f);
        return kiln_weights_fail(path, "out of memory reading it", nullptr);
    }
    const size_t got = std::fread(bytes, 1, static_cast<size_t>(size), f);
    std::fclose(f);
    const uint64_t total = got;
    uint64_t header = 0;
    if (total >= 8) {
        for (int i = 7; i >= 0; --i) header = (header << 8) | bytes[i];
    }
    if (got != static_cast<size_t>(size) || total < 8 || header > total - 8) {
        std::free(bytes);
        return kiln_weights_fail(path, "is truncated or not a safetensors file", nullptr);
    }
    const char* h = reinterpret_cast<const char*>(bytes + 8);
    const char* hend = h + header;
    const unsigned char* data = bytes + 8 + header;
    const uint64_t data_size = total - 8 - header;
    for (int i = 0; i < n; ++i) {
        const char* entry = kiln_json_field(h, hend, specs[i].key);
        if (entry == nullptr || *entry != '{') {
            std::free(bytes);
            return kiln_weights_fail(path, "has no tensor", specs[i].key);
        }
        const char* close = entry;
        while (close < hend && *close != '}') ++close;
        const char* dtype = kiln_json_field(entry, close, "dtype");
        const size_t dlen = std::strlen(specs[i].dtype);
        if (dtype == nullptr || dtype + dlen + 2 > close || *dtype != '"' ||
            std::memcmp(dtype + 1, specs[i].dtype, dlen) != 0 || dtype[dlen + 1] != '"') {
            std::free(bytes);
            return kiln_weights_fail(path, "holds another dtype than the code expects for", specs[i].key);
        }
        const char* at = kiln_json_field(entry, close, "data_offsets");
        uint64_t begin = 0, stop = 0;
        bool ok = at != nullptr && *at == '[';
        if (ok) {
            ++at;
            ok = kiln_json_uint(&at, close, &begin) && at < close && *at == ',';
        }
        if (ok) {
            ++at;
            ok = kiln_json_uint(&at, close, &stop) && at < close && *at == ']';
        }
        if (!ok || stop < begin || stop - begin != specs[i].bytes) {
            std::free(bytes);
            return kiln_weights_fail(path, "holds another size than the code expects for", specs[i].key);
        }
        if (stop > data_size) {
            std::free(bytes);
            return kiln_weights_fail(path, "is truncated: its end cuts off", specs[i].key);
        }
        found[i] = data + begin;
    }
    std::free(kiln_weights_file);
    kiln_weights_file = bytes;
    return 0;
}
