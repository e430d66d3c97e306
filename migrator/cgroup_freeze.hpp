// Freezing a runc container's cgroup from the runc shim, ahead of CRIU.
//
// CRIU freezes a container through its freezer cgroup, then checks the
// state and, if the freeze is still in progress, sleeps 100 ms before
// checking again (criu/seize.c): with cgroup v1 a busy container almost
// always costs those 100 ms of downtime. Frozen ahead of CRIU, with a fine
// poll, the container is already FROZEN when CRIU looks. CRIU thaws the
// cgroup once it holds the tasks by ptrace, as it does after its own freeze;
// only if it fails before that does the cgroup stay frozen, and thaw() is
// for that.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

namespace ferry::shim {

class cgroup_freezer {
  public:
    // The container's freezer from runc's state (<root>/<id>/state.json);
    // nothing if runc keeps no freezer path for it.
    static std::optional<cgroup_freezer> of_container(const std::filesystem::path& runc_root,
                                                      const std::string& id);
    // Freezes and waits until every task is frozen; false after `timeout`
    // (the cgroup is then thawed again and CRIU does it its own way).
    bool freeze(std::chrono::milliseconds timeout);
    [[nodiscard]] bool frozen() const;
    void thaw() const;

  private:
    explicit cgroup_freezer(std::filesystem::path dir, bool v2) : _dir(std::move(dir)), _v2(v2) {}
    std::filesystem::path _dir;
    bool _v2 = false;
};

} // namespace ferry::shim
