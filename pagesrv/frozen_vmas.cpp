#include "frozen_vmas.hpp"

#include "core/clock.hpp"
#include "sys/proc.hpp"

namespace ferry::pagesrv {

namespace {

// How often the wait for the freeze looks at its stop and go flags.
constexpr auto freeze_poll = std::chrono::milliseconds(20);
// The dump may take long to start (an engine's); beyond this the migration
// is gone or stuck, and the commit check reports a read that never began.
constexpr auto freeze_wait_limit = std::chrono::minutes(10);

} // namespace

frozen_vma_reader::frozen_vma_reader(criu_event_log& events, std::string migration_id, pid_t root)
    : _events(events), _id(std::move(migration_id)), _root(root), _thread([this] { run(); }) {}

frozen_vma_reader::~frozen_vma_reader() {
    {
        std::lock_guard lock(_mutex);
        _stop = true;
    }
    _changed.notify_all();
    _thread.join();
}

void frozen_vma_reader::tree_frozen() {
    {
        std::lock_guard lock(_mutex);
        _go = true;
    }
    _changed.notify_all();
}

void frozen_vma_reader::run() {
    const auto give_up = std::chrono::steady_clock::now() + freeze_wait_limit;
    for (;;) {
        {
            std::unique_lock lock(_mutex);
            if (_stop)
                return;
            if (_go)
                break;
        }
        if (_events.wait_for(_id, "frozen", freeze_poll).frozen)
            break;
        if (std::chrono::steady_clock::now() > give_up) {
            std::lock_guard lock(_mutex);
            _result.done = true;
            _result.error = "the tree was never reported frozen";
            _changed.notify_all();
            return;
        }
    }
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
