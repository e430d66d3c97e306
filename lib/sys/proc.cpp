#include "sys/proc.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <cstdlib>
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

namespace {

// The fields of a stat file after the command name, which may hold spaces
// and parentheses: they start after the last ')'. Field 3 (the state) is
// the first of them.
std::optional<std::vector<std::string>> stat_fields(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line))
        return std::nullopt;
    const auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos)
        return std::nullopt;
    std::istringstream rest(line.substr(close_paren + 1));
    std::vector<std::string> fields;
    std::string f;
    while (rest >> f)
        fields.push_back(f);
    if (fields.empty() || fields[0].size() != 1)
        return std::nullopt;
    return fields;
}

} // namespace

std::optional<char> state(pid_t pid) {
    const auto f = stat_fields(fmt::format("/proc/{}/stat", pid));
    if (!f)
        return std::nullopt;
    return (*f)[0][0];
}

std::vector<pid_t> tree(pid_t root) {
    std::vector<pid_t> out;
    std::vector<pid_t> todo{root};
    while (!todo.empty()) {
        const pid_t p = todo.back();
        todo.pop_back();
        if (!exists(p))
            continue;
        out.push_back(p);
        for (pid_t c : children(p))
            todo.push_back(c);
    }
    return out;
}

std::vector<thread_state> threads(pid_t pid) {
    std::vector<thread_state> out;
    std::error_code ec;
    for (const auto& task :
         std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
        thread_state t;
        try {
            t.tid = pid_t(std::stoi(task.path().filename().string()));
        } catch (const std::exception&) {
            continue;
        }
        const auto f = stat_fields((task.path() / "stat").string());
        if (!f)
            continue; // exited meanwhile
        t.state = (*f)[0][0];
        std::ifstream status(task.path() / "status");
        std::string line;
        while (std::getline(status, line))
            if (line.rfind("TracerPid:", 0) == 0)
                t.tracer = pid_t(std::strtol(line.c_str() + 10, nullptr, 10));
        out.push_back(t);
    }
    return out;
}

uint64_t memory_bytes(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/smaps_rollup", pid));
    std::string line;
    uint64_t kib = 0;
    while (std::getline(in, line)) {
        if (line.rfind("Rss:", 0) == 0 || line.rfind("Swap:", 0) == 0)
            kib += std::strtoull(line.c_str() + line.find(':') + 1, nullptr, 10);
    }
    return kib * 1024;
}

pid_t parent(pid_t pid) {
    const auto f = stat_fields(fmt::format("/proc/{}/stat", pid));
    if (!f || f->size() < 2)
        return 0;
    return pid_t(std::strtol((*f)[1].c_str(), nullptr, 10));
}

std::string comm(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/comm", pid));
    std::string name;
    std::getline(in, name);
    return name;
}

bool environ_has(pid_t pid, const std::string& entry) {
    std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
    std::string e;
    while (std::getline(in, e, '\0'))
        if (e == entry)
            return true;
    return false;
}

std::string rest_of(std::istream& in) {
    // operator<< on a stream buffer catches what the buffer throws and
    // stops there (failbit), keeping what it had copied.
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

std::string cmdline(pid_t pid) {
    std::ifstream in(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
    return in ? rest_of(in) : std::string();
}

std::optional<size_t> tcp_sockets(pid_t pid) {
    size_t n = 0;
    for (const char* table : {"tcp", "tcp6"}) {
        std::ifstream in(fmt::format("/proc/{}/net/{}", pid, table));
        if (!in)
            return std::nullopt;
        std::string line;
        std::getline(in, line); // the header
        while (std::getline(in, line))
            n++;
    }
    return n;
}

uint64_t start_time(pid_t pid) {
    // Field 22 is the 20th after the command name.
    const auto f = stat_fields(fmt::format("/proc/{}/stat", pid));
    if (!f || f->size() < 20)
        return 0;
    return std::strtoull((*f)[19].c_str(), nullptr, 10);
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
