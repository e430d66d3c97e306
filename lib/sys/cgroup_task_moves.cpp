#include "sys/cgroup_task_moves.hpp"

#include "core/error.hpp"
#include "core/unique_fd.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sys/mount.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ferry::cgroup_task_moves {

namespace {

constexpr const char* option = "favordynmods";

bool is_cgroup(const mount_entry& m) {
    return m.fstype == "cgroup2" || m.fstype == "cgroup";
}

bool has_option(const mount_entry& m) {
    const auto options = comma_list(m.super_options);
    return std::find(options.begin(), options.end(), option) != options.end();
}

} // namespace

plan plan_fast_moves(const std::vector<mount_entry>& mounts) {
    plan p;
    const mount_entry* v1 = nullptr;
    const mount_entry* v2 = nullptr;
    for (const auto& m : mounts) {
        if (!is_cgroup(m))
            continue;
        if (has_option(m))
            p.already_fast = true;
        if (m.fstype == "cgroup2" && !v2)
            v2 = &m;
        if (m.fstype == "cgroup" && !v1)
            v1 = &m;
    }
    if (p.already_fast)
        return p;
    const mount_entry* t = v2 ? v2 : v1;
    if (!t)
        return p;
    p.target = *t;
    for (auto& o : comma_list(t->super_options))
        if (o != "rw" && o != "ro")
            p.options.push_back(std::move(o));
    p.options.emplace_back(option);
    return p;
}

void apply(const plan& p) {
    if (!p.target)
        throw error("no cgroup hierarchy is mounted");
    const std::string& at = p.target->point;
    unique_fd fc(::fspick(AT_FDCWD, at.c_str(), FSPICK_CLOEXEC));
    if (!fc)
        throw error(fmt::format("fspick {}: {}", at, std::strerror(errno)));
    for (const auto& o : p.options) {
        // cgroup v1 names a hierarchy as name=NAME; the rest are flags.
        const auto eq = o.find('=');
        const int rc = eq == std::string::npos
                           ? ::fsconfig(fc.get(), FSCONFIG_SET_FLAG, o.c_str(), nullptr, 0)
                           : ::fsconfig(fc.get(), FSCONFIG_SET_STRING, o.substr(0, eq).c_str(),
                                        o.substr(eq + 1).c_str(), 0);
        if (rc != 0)
            throw error(fmt::format("{} option {}: {}", at, o, std::strerror(errno)));
    }
    if (::fsconfig(fc.get(), FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr, 0) != 0)
        throw error(fmt::format("reconfigure {} with {}: {}", at, fmt::join(p.options, ","),
                                std::strerror(errno)));
}

std::string make_fast(const plan& before, const std::string& mountinfo_path) {
    apply(before);
    // The kernel ignores the root flags outside the initial cgroup
    // namespace without an error: only the mount table says if it took.
    if (!plan_fast_moves(read_mountinfo(mountinfo_path)).already_fast)
        throw error(fmt::format("{} was reconfigured with {}, but the option did not take (a "
                                "cgroup namespace other than the initial one?)",
                                before.target->point, option));
    return fmt::format("{} ({}) reconfigured with {} (its options now {}): a container's "
                       "restore no longer waits for an RCU grace period to move its task into "
                       "its cgroups",
                       before.target->point, before.target->fstype, option,
                       fmt::join(before.options, ","));
}

} // namespace ferry::cgroup_task_moves
