// proc::write_tracker and proc::remote_syscall on a real child process: the
// pages it writes after the attach, and no others, are reported, once; its
// fd table is as it was; the read() it was blocked in when the tracker
// interrupted it goes on as if nothing happened; and a seccomp filter that
// refuses userfaultfd (as podman's and docker's do) does not stop the attach.
#include "core/page.hpp"
#include "sys/remote_syscall.hpp"
#include "sys/write_tracker.hpp"
#include "writer_child.hpp"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

using namespace ferry;

namespace {

constexpr size_t area_pages = 2048; // 8 MiB

// As a container's process: no capabilities (userfaultfd() without
// CAP_SYS_PTRACE gets user-mode faults only), and a seccomp filter that
// refuses userfaultfd outright.
void sandbox() {
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct none[2]{};
    if (::syscall(SYS_capset, &header, none) != 0)
        ::_exit(4);
    sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{sizeof code / sizeof code[0], code};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        ::_exit(4);
    if (::syscall(SYS_userfaultfd, 1) != -1 || errno != EPERM)
        ::_exit(5); // the filter must refuse it here
}

using child = test::writer_child;

void check_tracking(bool sandboxed) {
    child c(area_pages, sandboxed ? sandbox : nullptr);
    const size_t fds = c.open_fds();
    // Blocked in read() when the tracker interrupts it.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const uint64_t end = c.area + area_pages * page_size;
    {
        proc::write_tracker t(c.pid, std::chrono::seconds(5));
        CHECK(c.open_fds() == fds);
        bool covered = false;
        for (const auto& r : t.tracked())
            covered = covered || (r.start <= c.area && end <= r.end);
        REQUIRE(covered);

        std::vector<proc::page_run> written;
        t.written(c.area, end, written);
        CHECK(written.empty()); // filled before the attach: nothing since

        for (const uint64_t page : {3, 100, 101, 2000})
            c.write_page(page);
        t.written(c.area, end, written);
        const auto at = [&](uint64_t page) { return c.area + page * page_size; };
        CHECK(written == std::vector<proc::page_run>{
                             {at(3), at(4)}, {at(100), at(102)}, {at(2000), at(2001)}});
        written.clear();
        t.written(c.area, end, written);
        CHECK(written.empty()); // protected again by the look

        c.write_page(7);
        t.written(c.area, end, written);
        CHECK(written == std::vector<proc::page_run>{{at(7), at(8)}});
    }
    c.write_page(8); // untracked now: the write goes on as ever
    CHECK(c.exit_status() == 0);
}

} // namespace

TEST_CASE("a write tracker reports exactly the pages a process wrote since it last looked",
          "[write_tracker]") {
    check_tracking(false);
}

TEST_CASE("a write tracker attaches to a process without capabilities whose seccomp filter "
          "refuses userfaultfd",
          "[write_tracker]") {
    check_tracking(true);
}

TEST_CASE("a system call made by another task returns its own result", "[write_tracker]") {
    child c(area_pages);
    // getpid() in the child: its pid, not ours.
    CHECK(proc::remote_syscall(c.pid, SYS_getpid, {}, std::chrono::seconds(5)) == c.pid);
    // A call that fails says why, as -errno.
    CHECK(proc::remote_syscall(c.pid, SYS_close, {999999}, std::chrono::seconds(5)) == -EBADF);
    c.write_page(1); // its read() was restarted, twice
    CHECK(c.exit_status() == 0);
    CHECK_THROWS_WITH(proc::remote_syscall(999999, SYS_getpid, {}, std::chrono::seconds(1)),
                      Catch::Contains("no task 999999"));
}
