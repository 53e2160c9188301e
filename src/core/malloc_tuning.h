// glibc's malloc hands large freed blocks back to the kernel: its mmap threshold starts at
// 128 KiB (it rises only as mapped blocks are freed) and the top of the heap is trimmed once
// 128 KiB is free. A training step frees and re-allocates the same activation and gradient
// tensors every step, so with those defaults it pays a page fault per 4 KiB page, every step
// (ResNet-18 at batch 64: ~0.5 million faults in 35 steps, about 10% of the step time; see
// docs/performance.md). tune_malloc() keeps freed memory for reuse: mmap threshold at glibc's
// ceiling (32 MiB), trim threshold 128 MiB. Peak resident memory grows by a few percent.
//
// The user's choice wins: nothing changes when MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_
// or GLIBC_TUNABLES is set, or DDPX_MALLOC=system. `ddpx` calls it first thing; a program
// using the library calls it itself if it wants it. Returns whether it changed anything.
#pragma once

namespace ddpx {

bool tune_malloc();

// For a process whose threads take turns building and freeing whole models (`ddpx plan`'s
// tensor-parallel thread ranks, each building its own): one malloc arena for every thread, so
// that what one thread frees the next allocates again. With an arena a thread, tune_malloc()'s
// thresholds leave each thread's freed models in its own arena (`ddpx plan --model vit_b_16
// --gpus 4 --image_size 96`: peak resident memory 1.9 GB with a 1 MiB mmap threshold, 3.5 GB);
// with one arena it is 1.7 GB, without the 1 MiB threshold's page faults (2.3 -> 0.4 million,
// user+sys CPU 28.5 -> 25.4 s; docs/performance-log.md). Call it before the threads start. Nothing
// changes when MALLOC_ARENA_MAX or GLIBC_TUNABLES is set, or DDPX_MALLOC=system. Returns whether it
// changed anything.
bool share_one_malloc_arena();

}  // namespace ddpx
