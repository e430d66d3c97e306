// How long Ferry waits on CRIU, phase by phase. Every wait on CRIU is
// bounded, and the bound grows with the workload's memory: a lazy dump
// places every page in pipes (about 70 ms per GiB measured here), memory
// CRIU cannot leave lazy (shared mappings) is written into the images, and
// ending the source frees all of it. The constants are far above what was
// measured, so that only a CRIU that is stuck runs into them.
#pragma once

#include <chrono>
#include <cstdint>

namespace ferry::criu {

struct deadlines {
    // The dump's start -> every image written (post-dump; for an engine,
    // runc's status byte). Includes the engine's and runc's start-up.
    std::chrono::milliseconds dump{};
    // post-dump -> CRIU's page server listening (status-ready).
    std::chrono::milliseconds page_server{};
    // Any other single exchange with CRIU (one notification and its answer).
    std::chrono::milliseconds notify{};
    // CLOSE -> CRIU's end: it kills the frozen source tasks.
    std::chrono::milliseconds close{};
    // An abort -> CRIU's end: it resumes the source tasks.
    std::chrono::milliseconds abort{};
    // A restore's start -> the restored tasks ready to resume.
    std::chrono::milliseconds restore{};
    // Releasing a workload from a CRIU that had to be killed (kill, thaw,
    // unlock, and the wait until every task runs again).
    std::chrono::milliseconds release{};

    // `scale` multiplies every bound (tests use small ones).
    static deadlines for_memory(uint64_t workload_bytes, double scale = 1.0);
};

} // namespace ferry::criu
