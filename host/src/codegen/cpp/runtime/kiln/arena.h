// Kiln's cpu runtime: KilnArena, scratch memory grown on demand (the
// wrapper's arena of intermediates, the matrix product's packed blocks).
#pragma once
#include <cstddef>
#include <cstdlib>

// Scratch of at least this many bytes is rounded up to whole 2 MiB pages and,
// on Linux, asked to be backed by transparent huge pages (madvise): a matrix
// product's packed blocks are then physically contiguous, so they map evenly
// onto the cache's sets and need few TLB entries. On two Sapphire Rapids
// cores (THP in madvise mode) Kiln's 2048^3 and 1024x4096x1024 products ran
// 0.84-0.88 of torch.mm's speed so, against 0.78-0.86 without, faster in 5
// of 6 pairs. The cost: a thread's packed block of b (512 KiB on that machine)
// takes a whole 2 MiB page. -DKILN_ARENA_HUGE_PAGES=0 keeps 64-byte-aligned
// 4 KiB pages.
#ifndef KILN_ARENA_HUGE_PAGES
#define KILN_ARENA_HUGE_PAGES 1
#endif
#if KILN_ARENA_HUGE_PAGES && defined(__linux__)
#include <sys/mman.h>
#endif
constexpr size_t kKilnHugePage = size_t(2) << 20;
constexpr size_t kKilnHugeScratch = size_t(256) << 10;

// Scratch memory grown on demand, 64-byte aligned, kept between calls and
// freed with its owner (`static thread_local` ones: when the thread exits).
struct KilnArena {
    void* p = nullptr;
    size_t bytes = 0;
    KilnArena() = default;
    KilnArena(const KilnArena&) = delete;
    KilnArena& operator=(const KilnArena&) = delete;
    ~KilnArena() { std::free(p); }
    // At least `want` bytes, or nullptr when memory ran out.
    unsigned char* get(size_t want) {
        want = (want + 63) / 64 * 64;
        if (bytes < want) {
            std::free(p);
#if KILN_ARENA_HUGE_PAGES && defined(__linux__) && defined(MADV_HUGEPAGE)
            if (want >= kKilnHugeScratch) {
                const size_t whole = (want + kKilnHugePage - 1) / kKilnHugePage * kKilnHugePage;
                p = std::aligned_alloc(kKilnHugePage, whole);
                // Only advice: memory without huge pages works the same.
                if (p != nullptr) (void)madvise(p, whole, MADV_HUGEPAGE);
                bytes = p != nullptr ? whole : 0;
                return static_cast<unsigned char*>(p);
            }
#endif
            p = std::aligned_alloc(64, want);
            bytes = p != nullptr ? want : 0;
        }
        return static_cast<unsigned char*>(p);
    }
};
