#include "proc.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace ferry::proc {

std::vector<pid_t> ns_pids(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/status", pid));
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("NSpid:", 0) != 0)
            continue;
        std::istringstream fields(line.substr(6));
        std::vector<pid_t> pids;
        pid_t p;
        while (fields >> p)
            pids.push_back(p);
        return pids;
    }
    return {};
}

bool exists(pid_t pid) {
    return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

std::optional<char> state(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(in, line))
        return std::nullopt;
    // The command name may hold spaces and parentheses: the state follows the last ')'.
    const auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos || close_paren + 2 >= line.size())
        return std::nullopt;
    return line[close_paren + 2];
}

std::vector<pid_t> children(pid_t pid) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& task :
         std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
        std::ifstream in(task.path() / "children");
        pid_t c;
        while (in >> c)
            out.push_back(c);
    }
    return out;
}

std::map<pid_t, pid_t> map_tree_by_inner_pid(pid_t root) {
    std::map<pid_t, pid_t> by_inner;
    std::vector<pid_t> todo{root};
    while (!todo.empty()) {
        pid_t p = todo.back();
        todo.pop_back();
        auto pids = ns_pids(p);
        if (pids.empty())
            continue; // exited meanwhile
        by_inner[pids.back()] = p;
        for (pid_t c : children(p))
            todo.push_back(c);
    }
    return by_inner;
}

void kill_descendants(pid_t pid) {
    for (pid_t c : children(pid)) {
        kill_descendants(c);
        ::kill(c, SIGKILL);
    }
}

std::filesystem::path self_dir() {
    return std::filesystem::read_symlink("/proc/self/exe").parent_path();
}

} // namespace ferry::proc
