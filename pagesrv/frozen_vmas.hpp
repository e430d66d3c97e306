// The VMA flags of a tree that CRIU dumps with --smaps-before-freeze, read
// again the moment it is frozen (criu/vma_flags.hpp says why). Reading
// smaps walks every page table of the tree, so it starts at the plugin's
// "frozen" report and runs while the dump, the images' journey and the
// destination's restore go on; the commit waits for it.
#pragma once

#include "criu/vma_flags.hpp"
#include "criu_events.hpp"

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
    // Reads once `events` reports the migration frozen, or tree_frozen()
    // says so (a CRIU without Ferry's plugin reports nothing).
    frozen_vma_reader(criu_event_log& events, std::string migration_id, pid_t root);
    ~frozen_vma_reader();
    frozen_vma_reader(const frozen_vma_reader&) = delete;
    frozen_vma_reader& operator=(const frozen_vma_reader&) = delete;

    // The images exist, so the tree is frozen: read now if not yet started.
    void tree_frozen();

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

    criu_event_log& _events;
    const std::string _id;
    const pid_t _root;
    std::mutex _mutex;
    std::condition_variable _changed;
    bool _go = false, _stop = false;
    result _result;
    std::thread _thread; // last: it uses the members above
};

} // namespace ferry::pagesrv
