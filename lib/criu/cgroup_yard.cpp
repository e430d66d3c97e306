#include "criu/cgroup_yard.hpp"

#include "sys/mountinfo.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <vector>

namespace ferry::criu {

namespace fs = std::filesystem;

namespace {

// A cgroup mount of the host: its mount point, its root within the
// hierarchy, and the hierarchy ("" for cgroup2, else its sorted controllers
// and name=).
struct cgroup_mount {
    std::string point, root, hierarchy;
};

std::vector<cgroup_mount> cgroup_mounts(const fs::path& mountinfo) {
    std::vector<cgroup_mount> out;
    for (const auto& m : read_mountinfo(mountinfo)) {
        const auto opts = comma_list(m.super_options);
        if (m.fstype == "cgroup2") {
            out.push_back({m.point, m.root, ""});
        } else if (m.fstype == "cgroup") {
            std::vector<std::string> names;
            for (const auto& o : opts)
                if (o != "rw" && o != "ro" && o != "clone_children" && o != "xattr" &&
                    o != "noprefix" && o.rfind("release_agent=", 0) != 0 &&
                    o.rfind("cpuset_v2_mode", 0) != 0 && o != "none" && o != "favordynmods")
                    names.push_back(o);
            std::sort(names.begin(), names.end());
            std::string h;
            for (const auto& n : names)
                h += (h.empty() ? "" : ",") + n;
            out.push_back({m.point, m.root, h});
        }
    }
    return out;
}

// CRIU's directory name for a hierarchy as /proc/PID/cgroup names it.
std::string criu_name(const std::string& controllers) {
    if (controllers.empty())
        return "unified";
    if (controllers.rfind("name=", 0) == 0)
        return controllers.substr(5);
    return controllers;
}

std::string sorted(const std::string& controllers) {
    auto v = comma_list(controllers);
    std::sort(v.begin(), v.end());
    std::string h;
    for (const auto& n : v)
        h += (h.empty() ? "" : ",") + n;
    return h;
}

} // namespace

yard_choice host_cgroup_yard(const fs::path& proc, const fs::path& root) {
    auto no = [](std::string why) { return yard_choice{{}, std::move(why)}; };
    std::ifstream in(proc / "self/cgroup");
    const auto mounts = cgroup_mounts(proc / "self/mountinfo");
    bool any = false;
    for (std::string line; std::getline(in, line);) {
        // ID:CONTROLLERS:PATH
        const auto a = line.find(':');
        const auto b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos)
            continue;
        const auto controllers = line.substr(a + 1, b - a - 1);
        const auto want = (root / criu_name(controllers)).string();
        const auto hierarchy = sorted(controllers);
        const bool found = std::any_of(mounts.begin(), mounts.end(), [&](const cgroup_mount& m) {
            return m.point == want && m.root == "/" && m.hierarchy == hierarchy;
        });
        if (!found)
            return no(fmt::format("{} is not a mount of the whole {} hierarchy", want,
                                  controllers.empty() ? "cgroup2" : controllers));
        any = true;
    }
    if (!any)
        return no("this host lists no cgroup hierarchies");
    return {root, ""};
}

std::string cgroup_yard_config_line(const yard_choice& choice) {
    return choice.dir.empty() ? "" : "cgroup-yard " + choice.dir.string() + "\n";
}

} // namespace ferry::criu
