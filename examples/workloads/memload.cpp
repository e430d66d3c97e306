// memload: a memory-heavy, multi-threaded workload with a forked child, used
// by the demo, the integration tests and the benchmarks.
//
// The parent fills --mib MiB with a pattern derived from --seed (and
// --shared-mib MiB of MAP_SHARED memory, which CRIU dumps eagerly); the child
// (forked first, so it shares none of it) fills --child-mib MiB with its own.
// Worker threads keep reading random pages and checking them. Once a second
// each process appends "tick" lines to stdout.
//
//   SIGUSR1  every process verifies all of its memory and prints
//            "verify ok <role> pages=N" or "verify FAIL <role> page=P".
//   --touch-after-freeze
//            the parent watches its clock; after a gap longer than 50 ms
//            (it was frozen, then resumed) it reads every page once in random
//            order, timing each access, and prints
//            "touch pages=N p50_ns=.. p99_ns=.. p999_ns=.. max_ns=..".
//            then "touch_cdf ns=q0.005,...,q0.995,q0.999,q0.9999,max".
//            --touch-threads N: N threads share the touching.
//   --sparse-mib N
//            the parent maps N MiB more but writes only every 8th page (the
//            rest never exist), and marks the region MADV_DONTDUMP and
//            MADV_RANDOM; SIGUSR1 then also checks the written pages, that
//            the others read as zeros, and that the flags survived:
//            "verify ok sparse pages=N written=W flags=dd,rr".
//   --park-aligned-sp
//            one more thread parks in pause() with its stack pointer on a
//            page boundary (x86-64 only). Stock CRIU then marked nothing of
//            the task lazy (examples/criu-patches/0010).
//   --seccomp
//            each process loads a seccomp filter before its threads start
//            (so they share it) that fails acct(2) with ENOTBLK; SIGUSR1
//            then also prints "seccomp probe errno=E" (15 while it holds).
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t page = 4096;
constexpr size_t words_per_page = page / sizeof(uint64_t);

volatile sig_atomic_t verify_requested = 0;
struct region;
extern region shared_region; // MAP_SHARED memory, which CRIU cannot leave lazy

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

uint64_t pattern(uint64_t seed, uint64_t page_index, uint64_t word) {
    uint64_t x = seed ^ (page_index * 0x9e3779b97f4a7c15ull) ^ (word * 0xbf58476d1ce4e5b9ull);
    x ^= x >> 31;
    return x * 0x94d049bb133111ebull;
}

struct region {
    uint64_t* base = nullptr;
    size_t pages = 0;
    uint64_t seed = 0;

    void fill() {
        for (size_t p = 0; p < pages; p++)
            for (size_t w = 0; w < words_per_page; w++)
                base[p * words_per_page + w] = pattern(seed, p, w);
    }
    // Returns the first bad page, or -1.
    long verify_page(size_t p) const {
        for (size_t w = 0; w < words_per_page; w++)
            if (base[p * words_per_page + w] != pattern(seed, p, w))
                return long(p);
        return -1;
    }
    long verify_all() const {
        for (size_t p = 0; p < pages; p++)
            if (verify_page(p) >= 0)
                return long(p);
        return -1;
    }
};

region shared_region;

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Every 8th page written, the rest never touched; madvise flags that a
// migration must carry over.
struct sparse_region {
    static constexpr size_t stride = 8;
    region r;

    void setup(size_t mib, uint64_t seed) {
        r.pages = mib * (1 << 20) / page;
        r.seed = seed;
        void* m = mmap(nullptr, r.pages * page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED || madvise(m, r.pages * page, MADV_DONTDUMP) ||
            madvise(m, r.pages * page, MADV_RANDOM)) {
            perror("sparse region");
            exit(1);
        }
        r.base = static_cast<uint64_t*>(m);
        for (size_t p = 0; p < r.pages; p += stride)
            for (size_t w = 0; w < words_per_page; w++)
                r.base[p * words_per_page + w] = pattern(seed, p, w);
    }
    // The region's VmFlags in /proc/self/smaps hold every token of `want`.
    bool flags_kept(const char* const* want, size_t n) const {
        FILE* f = fopen("/proc/self/smaps", "r");
        if (!f)
            return false;
        char line[512];
        bool inside = false, ok = false;
        const auto base = reinterpret_cast<uintptr_t>(r.base);
        while (fgets(line, sizeof line, f)) {
            uintptr_t start = 0, end = 0;
            if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " ", &start, &end) == 2 &&
                strchr(line, '-') < strchr(line, ' ')) {
                inside = start <= base && base < end;
                continue;
            }
            if (!inside || strncmp(line, "VmFlags:", 8) != 0)
                continue;
            ok = true;
            for (size_t i = 0; i < n; i++) {
                char token[8];
                snprintf(token, sizeof token, " %s ", want[i]);
                ok &= strstr(line + 7, token) != nullptr;
            }
            break;
        }
        fclose(f);
        return ok;
    }
    void verify() const {
        for (size_t p = 0; p < r.pages; p++)
            for (size_t w = 0; w < words_per_page; w++) {
                const uint64_t want = p % stride ? 0 : pattern(r.seed, p, w);
                if (r.base[p * words_per_page + w] != want) {
                    say("verify FAIL sparse page=%zu\n", p);
                    return;
                }
            }
        static const char* const flags[] = {"dd", "rr"};
        if (!flags_kept(flags, 2)) {
            say("verify FAIL sparse flags: MADV_DONTDUMP or MADV_RANDOM lost\n");
            return;
        }
        say("verify ok sparse pages=%zu written=%zu flags=dd,rr\n", r.pages,
            (r.pages + stride - 1) / stride);
    }
};

sparse_region sparse;

region allocate(size_t mib, uint64_t seed, int sharing = MAP_PRIVATE) {
    region r;
    r.pages = mib * (1 << 20) / page;
    r.seed = seed;
    void* m = mmap(nullptr, r.pages * page, PROT_READ | PROT_WRITE, sharing | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    r.base = static_cast<uint64_t*>(m);
    r.fill();
    return r;
}

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        (void)!write(STDOUT_FILENO, buf, size_t(std::min<int>(n, int(sizeof buf) - 1)));
}

std::atomic<uint64_t> checks{0};
std::atomic<uint64_t> failures{0};

void worker(const region* r, unsigned id) {
    std::minstd_rand rng(id + 1);
    for (;;) {
        const size_t p = rng() % r->pages;
        if (r->verify_page(p) >= 0)
            failures++;
        checks++;
        struct timespec ts = {0, 2'000'000};
        nanosleep(&ts, nullptr);
    }
}

// CLOCK_REALTIME: CRIU restores into a time namespace whose offsets hide
// most of the freeze from CLOCK_MONOTONIC.
uint64_t realtime_ns() {
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// The host's pid of this process, as /proc (mounted by the host) sees it.
// A restore gives the tree new host pids while its own pids stay the same.
std::string host_pid() {
    char buf[32];
    ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// Returns once this process has been checkpointed and restored: its host pid
// changed, or (if /proc is not the host's) its wall clock jumped by > 50 ms.
void wait_for_freeze() {
    const std::string pid_before = host_pid();
    const bool pid_tells = !pid_before.empty() && pid_before != std::to_string(getpid());
    uint64_t last = realtime_ns();
    for (;;) {
        struct timespec ts = {0, 1'000'000};
        nanosleep(&ts, nullptr);
        if (pid_tells) {
            if (host_pid() != pid_before)
                return;
            continue;
        }
        const uint64_t now = realtime_ns();
        const bool frozen = now - last > 50'000'000;
        last = now;
        if (frozen)
            return;
    }
}

bool touch_sequential = false;
unsigned touch_threads = 1;

void touch_all(const region& r) {
    std::vector<uint32_t> order(r.pages);
    for (size_t i = 0; i < r.pages; i++)
        order[i] = uint32_t(i);
    if (!touch_sequential)
        std::shuffle(order.begin(), order.end(), std::minstd_rand(7));
    std::vector<uint64_t> lat(r.pages);
    std::atomic<uint64_t> bad{0};
    const uint64_t start = now_ns();
    // With --touch-threads N each thread takes every Nth page of the order,
    // so N threads fault at once (and, in sequential order, interleave).
    auto slice = [&](unsigned k) {
        uint64_t wrong = 0;
        for (size_t i = k; i < r.pages; i += touch_threads) {
            const size_t p = order[i];
            const uint64_t t0 = now_ns();
            const uint64_t v = *const_cast<volatile uint64_t*>(&r.base[p * words_per_page]);
            const uint64_t t1 = now_ns();
            lat[i] = t1 - t0;
            wrong += v != pattern(r.seed, p, 0);
        }
        bad += wrong;
    };
    std::vector<std::thread> others;
    for (unsigned k = 1; k < touch_threads; k++)
        others.emplace_back(slice, k);
    slice(0);
    for (auto& t : others)
        t.join();
    const uint64_t total = now_ns() - start;
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double q) {
        return lat[std::min(lat.size() - 1, size_t(q * double(lat.size())))];
    };
    say("touch pages=%zu bad=%" PRIu64 " total_ms=%.1f p50_ns=%" PRIu64 " p99_ns=%" PRIu64
        " p999_ns=%" PRIu64 " max_ns=%" PRIu64 "\n",
        r.pages, bad.load(), double(total) / 1e6, pct(0.50), pct(0.99), pct(0.999), lat.back());
    // The distribution for a CDF plot: every half percent, then the tail.
    std::string cdf = "touch_cdf ns=";
    for (int i = 1; i < 200; i++)
        cdf += std::to_string(pct(i / 200.0)) + ",";
    cdf += std::to_string(pct(0.999)) + "," + std::to_string(pct(0.9999)) + "," +
           std::to_string(lat.back()) + "\n";
    (void)!write(STDOUT_FILENO, cdf.data(), cdf.size()); // longer than say()'s buffer
}

void fork_and_verify(const region& r) {
    pid_t c = fork();
    if (c == 0) {
        const long bad = r.verify_all();
        if (bad < 0)
            say("postfork verify ok pages=%zu\n", r.pages);
        else
            say("postfork verify FAIL page=%ld\n", bad);
        _exit(0);
    }
    if (c > 0)
        waitpid(c, nullptr, 0);
}

// A region whose layout changes right after the migration, to exercise the
// lazy-pages daemon's REMOVE, UNMAP and REMAP handling.
struct churn_region {
    // Larger than lazy-pages' early areas (--early-area-pages, 16 MiB), which
    // are pulled first from the commit on: this one must still be lazy when
    // the churn runs.
    static constexpr size_t pages = 8192;
    region r;
    void* landing = nullptr; // where the tail is moved to

    void setup(uint64_t seed) {
        r = allocate(pages * page / (1 << 20), seed);
        landing =
            mmap(nullptr, (pages - 512) * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    void churn() {
        char* base = reinterpret_cast<char*>(r.base);
        const char* err = nullptr;
        if (madvise(base, 256 * page, MADV_DONTNEED))
            err = "madvise";
        else if (munmap(base + 256 * page, 256 * page))
            err = "munmap";
        void* moved = mremap(base + 512 * page, (pages - 512) * page, (pages - 512) * page,
                             MREMAP_MAYMOVE | MREMAP_FIXED, landing);
        if (!err && moved == MAP_FAILED)
            err = "mremap";
        for (size_t p = 0; !err && p < 256; p++)
            for (size_t w = 0; w < words_per_page; w++)
                if (r.base[p * words_per_page + w] != 0)
                    err = "a page read non-zero after MADV_DONTNEED";
        const uint64_t* m = static_cast<const uint64_t*>(moved);
        for (size_t p = 512; !err && p < pages; p++)
            for (size_t w = 0; w < words_per_page; w++)
                if (m[(p - 512) * words_per_page + w] != pattern(r.seed, p, w))
                    err = "a moved page lost its contents";
        if (err)
            say("churn FAIL %s\n", err);
        else
            say("churn ok\n");
    }
};

struct after_freeze {
    bool touch = false, fork = false, churn = false;
    [[nodiscard]] bool any() const { return touch || fork || churn; }
};

void watch_for_migration(const region& r, churn_region* cr, after_freeze what) {
    wait_for_freeze();
    if (what.touch)
        touch_all(r);
    if (what.churn && cr)
        cr->churn(); // first: it is quick, and its ranges are still lazy
    if (what.fork)
        fork_and_verify(r);
}

// Switches to a stack of its own whose pointer is page aligned and stays in
// pause() there for good, every signal blocked (the handlers never run on it).
[[noreturn]] void park_on_page_aligned_stack() {
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    constexpr size_t size = 64 << 10;
    void* stack = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (stack == MAP_FAILED) {
        perror("memload: mmap for the parked thread's stack");
        exit(1);
    }
    char* top = static_cast<char*>(stack) + size / 2; // page aligned, room both ways
#if defined(__x86_64__)
    asm volatile("mov %0, %%rsp\n"
                 "1: mov %1, %%eax\n"
                 "syscall\n"
                 "jmp 1b\n"
                 :
                 : "r"(top), "i"(SYS_pause)
                 : "rax", "rcx", "r11", "memory");
    __builtin_unreachable();
#else
    (void)top;
    fprintf(stderr, "memload: --park-aligned-sp is x86-64 only\n");
    exit(2);
#endif
}

bool park_aligned_sp = false;
bool seccomp_probe = false;

// acct(2) fails with ENOTBLK, everything else is allowed; any other
// architecture's calls too (this is a marker, not a sandbox).
void load_probe_filter() {
    sock_filter code[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_acct, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOTBLK),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof(code) / sizeof(code[0])), code};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) {
        perror("memload: seccomp");
        exit(1);
    }
}

int seccomp_probe_errno() {
    return syscall(SYS_acct, nullptr) == 0 ? 0 : errno;
}

void run(const char* role, const region& r, unsigned threads, after_freeze what, churn_region* cr) {
    if (seccomp_probe)
        load_probe_filter();
    for (unsigned i = 0; i < threads; i++)
        std::thread(worker, &r, i).detach();
    if (what.any())
        std::thread(watch_for_migration, std::cref(r), cr, what).detach();
    if (park_aligned_sp)
        std::thread(park_on_page_aligned_stack).detach();
    say("ready %s pid=%d pages=%zu threads=%u\n", role, int(getpid()), r.pages,
        threads + 1 + (what.any() ? 1 : 0) + (park_aligned_sp ? 1 : 0));
    uint64_t tick = 0;
    uint64_t last_tick = now_ns();
    for (;;) {
        struct timespec ts = {0, 20'000'000};
        nanosleep(&ts, nullptr);
        if (verify_requested) {
            verify_requested = 0;
            const long bad = r.verify_all();
            if (bad < 0)
                say("verify ok %s pages=%zu\n", role, r.pages);
            else
                say("verify FAIL %s page=%ld\n", role, bad);
            if (sparse.r.pages)
                sparse.verify();
            if (seccomp_probe)
                say("seccomp probe errno=%d\n", seccomp_probe_errno());
            if (shared_region.pages) {
                const long sbad = shared_region.verify_all();
                if (sbad < 0)
                    say("verify ok shared pages=%zu\n", shared_region.pages);
                else
                    say("verify FAIL shared page=%ld\n", sbad);
            }
        }
        if (now_ns() - last_tick >= 1'000'000'000ull) {
            last_tick = now_ns();
            say("tick %s %" PRIu64 " checks=%" PRIu64 " failures=%" PRIu64 "\n", role, ++tick,
                checks.load(), failures.load());
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    size_t mib = 256, child_mib = 16;
    unsigned threads = 2;
    uint64_t seed = 42;
    after_freeze what;
    size_t shared_mib = 0, sparse_mib = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&] {
            return i + 1 < argc ? argv[++i]
                                : (fprintf(stderr, "%s needs a value\n", a.c_str()), exit(2), "");
        };
        if (a == "--mib")
            mib = std::strtoull(next(), nullptr, 10);
        else if (a == "--child-mib")
            child_mib = std::strtoull(next(), nullptr, 10);
        else if (a == "--threads")
            threads = unsigned(std::strtoul(next(), nullptr, 10));
        else if (a == "--seed")
            seed = std::strtoull(next(), nullptr, 10);
        else if (a == "--touch-after-freeze")
            what.touch = true;
        else if (a == "--shared-mib")
            shared_mib = std::strtoull(next(), nullptr, 10);
        else if (a == "--sparse-mib")
            sparse_mib = std::strtoull(next(), nullptr, 10);
        else if (a == "--touch-order") {
            const std::string o = next();
            if (o != "random" && o != "sequential") {
                fprintf(stderr, "--touch-order is random or sequential\n");
                return 2;
            }
            touch_sequential = o == "sequential";
        } else if (a == "--touch-threads") {
            touch_threads = unsigned(std::strtoul(next(), nullptr, 10));
            if (touch_threads < 1 || touch_threads > 64) {
                fprintf(stderr, "--touch-threads is 1 to 64\n");
                return 2;
            }
        } else if (a == "--fork-after-freeze")
            what.fork = true;
        else if (a == "--churn-after-freeze")
            what.churn = true;
        else if (a == "--park-aligned-sp")
            park_aligned_sp = true;
        else if (a == "--seccomp")
            seccomp_probe = true;
        else {
            fprintf(stderr,
                    "usage: memload [--mib N] [--child-mib N] [--threads N] [--seed N] "
                    "[--shared-mib N] [--sparse-mib N] [--touch-after-freeze [--touch-order "
                    "random|sequential] [--touch-threads N]] [--fork-after-freeze] "
                    "[--churn-after-freeze] [--park-aligned-sp] [--seccomp]\n");
            return 2;
        }
    }
    setsid(); // its own session, so CRIU needs no --shell-job
    struct sigaction sa {};
    sa.sa_handler = [](int) { verify_requested = 1; };
    sigaction(SIGUSR1, &sa, nullptr);

    pid_t child = child_mib ? fork() : -1;
    if (child == 0) {
        region r = allocate(child_mib, seed + 1);
        run("child", r, 1, after_freeze{}, nullptr);
    }
    // The churn region is mapped before the main one, so it lies above it:
    // the background pull goes upwards and reaches it last, and it is still
    // lazy when the churn runs right after the migration.
    static churn_region cr;
    if (what.churn)
        cr.setup(seed + 2);
    region r = allocate(mib, seed);
    if (shared_mib)
        shared_region = allocate(shared_mib, seed + 3, MAP_SHARED);
    if (sparse_mib)
        sparse.setup(sparse_mib, seed + 4);
    // Forward SIGUSR1 to the child as well.
    if (child > 0) {
        static pid_t child_pid;
        child_pid = child;
        sa.sa_handler = [](int) {
            verify_requested = 1;
            kill(child_pid, SIGUSR1);
        };
        sigaction(SIGUSR1, &sa, nullptr);
    }
    run("parent", r, threads, what, what.churn ? &cr : nullptr);
}
