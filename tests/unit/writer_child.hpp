// A child process whose memory tests watch from outside (the write tracker,
// the pre-copy): it fills an area of its own with 1s, then writes a 2 into
// the page it is told to (or every page), or drops it (MADV_DONTNEED), and answers with
// the command once done. A read() that fails (EINTR, or the kernel's
// -ERESTART leaking out) ends it with status 3.
#pragma once

#include "core/page.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace ferry::test {

class writer_child {
  public:
    static constexpr uint64_t quit = ~uint64_t(0);
    static constexpr uint64_t drop_flag = 1ull << 62;
    static constexpr uint64_t all_pages = 1ull << 61;

    // `in_child`, if set, runs in the child after the fill (it may _exit).
    explicit writer_child(size_t pages, void (*in_child)() = nullptr) : _pages(pages) {
        int c[2], a[2];
        REQUIRE(::pipe2(c, O_CLOEXEC) == 0);
        REQUIRE(::pipe2(a, O_CLOEXEC) == 0);
        pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
            child_main(c[0], a[1], in_child);
        ::close(c[0]);
        ::close(a[1]);
        _commands = c[1];
        _answers = a[0];
        REQUIRE(::read(_answers, &area, sizeof area) == sizeof area);
    }
    ~writer_child() {
        if (pid > 0) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, nullptr, 0);
        }
        ::close(_commands);
        ::close(_answers);
    }
    writer_child(const writer_child&) = delete;
    writer_child& operator=(const writer_child&) = delete;

    // The child writes `page` (or drops it) and says so.
    void write_page(uint64_t page) const { command(page); }
    void drop_page(uint64_t page) const { command(page | drop_flag); }
    // The child writes a 2 into every page of its area.
    void write_all() const { command(all_pages); }
    int exit_status() {
        REQUIRE(::write(_commands, &quit, sizeof quit) == sizeof quit);
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    [[nodiscard]] size_t open_fds() const {
        size_t n = 0;
        for ([[maybe_unused]] const auto& e :
             std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
            n++;
        return n;
    }
    // Some VMA of the child is registered for uffd write protection.
    [[nodiscard]] bool write_tracked() const {
        std::ifstream smaps("/proc/" + std::to_string(pid) + "/smaps");
        for (std::string line; std::getline(smaps, line);)
            if (line.starts_with("VmFlags:") && line.find(" uw") != std::string::npos)
                return true;
        return false;
    }
    [[nodiscard]] uint64_t end() const { return area + _pages * page_size; }

    pid_t pid = -1;
    uint64_t area = 0;

  private:
    void command(uint64_t cmd) const {
        REQUIRE(::write(_commands, &cmd, sizeof cmd) == sizeof cmd);
        uint64_t said = 0;
        REQUIRE(::read(_answers, &said, sizeof said) == sizeof said);
        REQUIRE(said == cmd);
    }
    [[noreturn]] void child_main(int commands, int answers, void (*in_child)()) const {
        auto* mem = static_cast<char*>(::mmap(nullptr, _pages * page_size, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (mem == MAP_FAILED)
            ::_exit(2);
        std::memset(mem, 1, _pages * page_size);
        if (in_child)
            in_child();
        const uint64_t addr = reinterpret_cast<uint64_t>(mem);
        if (::write(answers, &addr, sizeof addr) != sizeof addr)
            ::_exit(2);
        for (;;) {
            uint64_t cmd = 0;
            if (::read(commands, &cmd, sizeof cmd) != sizeof cmd)
                ::_exit(3);
            if (cmd == quit)
                ::_exit(0);
            const uint64_t page = cmd & ~drop_flag;
            if (cmd == all_pages)
                for (size_t i = 0; i < _pages; i++)
                    mem[i * page_size] = 2;
            else if (cmd & drop_flag)
                (void)::madvise(mem + page * page_size, page_size, MADV_DONTNEED);
            else
                mem[page * page_size] = 2;
            if (::write(answers, &cmd, sizeof cmd) != sizeof cmd)
                ::_exit(2);
        }
    }

    size_t _pages;
    int _commands = -1, _answers = -1;
};

} // namespace ferry::test
