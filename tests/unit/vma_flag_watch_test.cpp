// The perf watch for calls that change VMA flags (sys/vma_flag_watch.hpp),
// on a real child process. Needs root and tracefs; says so if absent.
#include "sys/vma_flag_watch.hpp"

#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

using namespace ferry;

namespace {

// A child that waits for one command byte on a pipe, runs it, answers.
struct child {
    pid_t pid = -1;
    int cmd = -1, done = -1;
    child() {
        int a[2], b[2];
        REQUIRE(::pipe(a) == 0);
        REQUIRE(::pipe(b) == 0);
        pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            ::close(a[1]);
            ::close(b[0]);
            void* m = ::mmap(nullptr, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                             -1, 0);
            static_cast<char*>(m)[0] = 1;
            char c;
            while (::read(a[0], &c, 1) == 1) {
                switch (c) {
                case 'n': // common calls that change no flag
                    (void)::madvise(m, 4096, MADV_DONTNEED);
                    (void)::madvise(m, 4096, MADV_WILLNEED);
                    (void)::prctl(PR_SET_NAME, "watched");
                    break;
                case 'f':
                    (void)::madvise(m, 1 << 20, MADV_DONTFORK);
                    break;
                case 'l':
                    // The system call itself: AddressSanitizer's mlock() does nothing.
                    (void)::syscall(SYS_mlock, m, 4096);
                    break;
                case 't': {
                    pthread_t t;
                    pthread_create(
                        &t, nullptr,
                        [](void*) -> void* {
                            ::pause(); // lives until the child is killed
                            return nullptr;
                        },
                        nullptr);
                    break;
                }
                }
                (void)!::write(b[1], &c, 1);
            }
            ::_exit(0);
        }
        ::close(a[0]);
        ::close(b[1]);
        cmd = a[1];
        done = b[0];
    }
    void run(char c) {
        REQUIRE(::write(cmd, &c, 1) == 1);
        REQUIRE(::read(done, &c, 1) == 1);
    }
    ~child() {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
        ::close(cmd);
        ::close(done);
    }
};

} // namespace

TEST_CASE("the watch sees calls that change VMA flags and ignores the rest", "[vma_flag_watch]") {
    std::string why_not;
    const auto ids = proc::probe_watch_tracepoints(why_not);
    if (!ids) {
        WARN("no tracepoints here: " << why_not);
        return;
    }
    child c;
    proc::vma_flag_watch watch(c.pid, *ids);
    CHECK(watch.check().quiet);
    c.run('n');
    CHECK(watch.check().quiet);
    SECTION("madvise(MADV_DONTFORK)") {
        c.run('f');
        const auto v = watch.check();
        CHECK_FALSE(v.quiet);
        CHECK(v.why.find("1 madvise, mlock or prctl call") != std::string::npos);
    }
    SECTION("mlock") {
        c.run('l');
        CHECK_FALSE(watch.check().quiet);
    }
    SECTION("a new thread") {
        c.run('t');
        // The thread exists once the child's /proc says so.
        for (int i = 0; i < 500 && watch.check().quiet; i++)
            ::usleep(2000);
        const auto v = watch.check();
        CHECK_FALSE(v.quiet);
        CHECK(v.why.find("started meanwhile") != std::string::npos);
    }
}
