#include "frozen_vmas.hpp"

#include "core/clock.hpp"
#include "sys/proc.hpp"

namespace ferry::pagesrv {

frozen_vma_reader::frozen_vma_reader(pid_t root) : _root(root), _thread([this] { run(); }) {}

frozen_vma_reader::~frozen_vma_reader() {
    _thread.join();
}

void frozen_vma_reader::run() {
    result r;
    const uint64_t t0 = monotonic_ns();
    try {
        for (const pid_t pid : proc::tree(_root))
            r.vmas[pid] = criu::read_smaps(pid);
    } catch (const std::exception& e) {
        r.error = e.what();
    }
    r.read_ns = monotonic_ns() - t0;
    r.done = true;
    {
        std::lock_guard lock(_mutex);
        _result = std::move(r);
    }
    _changed.notify_all();
}

const frozen_vma_reader::result& frozen_vma_reader::wait(std::chrono::milliseconds timeout) {
    std::unique_lock lock(_mutex);
    _changed.wait_for(lock, timeout, [&] { return _result.done; });
    return _result;
}

} // namespace ferry::pagesrv
