// The VMA flags of a tree that CRIU dumped with --smaps-before-freeze, read
// again from the frozen tree (criu/vma_flags.hpp says why) for the commit to
// compare with the images.
//
// Reading smaps walks every page table of the tree (about 8 ms per GiB
// here) under its mmap lock, so the read starts once the images exist, at
// registration, and runs while they travel and the destination restores.
// Started at the freeze, it held the lock against CRIU's parasite, which
// maps its blob with it, and the dump waited (59 ms at 4 GiB).
#pragma once

#include "criu/vma_flags.hpp"

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ferry::pagesrv {

class frozen_vma_reader {
  public:
    // Starts reading the smaps of every process of the tree under `root`,
    // which must be frozen.
    explicit frozen_vma_reader(pid_t root);
    ~frozen_vma_reader(); // joins: the read is bounded by the tree's memory
    frozen_vma_reader(const frozen_vma_reader&) = delete;
    frozen_vma_reader& operator=(const frozen_vma_reader&) = delete;

    struct result {
        bool done = false;
        std::string error;                                  // the read failed
        std::map<pid_t, std::vector<criu::smaps_vma>> vmas; // by host pid
        uint64_t read_ns = 0;                               // how long the read took
    };
    // The read, waiting up to `timeout` for it (done false if it is not over).
    [[nodiscard]] const result& wait(std::chrono::milliseconds timeout);

  private:
    void run();

    const pid_t _root;
    std::mutex _mutex;
    std::condition_variable _changed;
    result _result;
    std::thread _thread; // last: it uses the members above
};

} // namespace ferry::pagesrv
