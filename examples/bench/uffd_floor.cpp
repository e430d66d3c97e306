// The userfaultfd floor on this machine: the cheapest a missing-page fault
// can be served from user space, with the page ready in memory. A handler
// answers every fault with UFFDIO_COPY from a pre-filled page; a toucher
// reads each page once and times the access, as memload does after a
// migration. Modes:
//   same-cpu     handler and toucher pinned to one CPU (handler blocks in poll)
//   cross-block  handler pinned to another CPU, blocking in poll
//   cross-spin   handler pinned to another CPU, spinning on the uffd
// Order: random or sequential. Prints p50/p99/p99.9/max in microseconds.
// A fourth argument, idle-poll, holds the host's CPU latency target at 0 for
// the run (what a migration does through its downtime, lib/sys/idle_poll):
// an idle CPU polls, and a cross-CPU wake-up skips a halted vCPU's exit.
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

void pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

std::atomic<bool> done{false};

void handler(int uffd, const char* page, int cpu, bool spin) {
    pin(cpu);
    uffd_msg msgs[16];
    while (!done.load(std::memory_order_relaxed)) {
        if (!spin) {
            pollfd p{uffd, POLLIN, 0};
            if (poll(&p, 1, 100) <= 0)
                continue;
        }
        const ssize_t n = read(uffd, msgs, sizeof msgs);
        if (n <= 0)
            continue;
        for (ssize_t i = 0; i < n / ssize_t(sizeof(uffd_msg)); i++) {
            if (msgs[i].event != UFFD_EVENT_PAGEFAULT)
                continue;
            uffdio_copy c{msgs[i].arg.pagefault.address & ~4095ull,
                          reinterpret_cast<uint64_t>(page), 4096, 0, 0};
            ioctl(uffd, UFFDIO_COPY, &c);
        }
    }
}

} // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "same-cpu";
    const std::string order = argc > 2 ? argv[2] : "random";
    const size_t pages = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 16384;
    const bool idle_poll = argc > 4 && std::string(argv[4]) == "idle-poll";
    if ((mode != "same-cpu" && mode != "cross-block" && mode != "cross-spin") ||
        (argc > 4 && !idle_poll)) {
        fprintf(stderr, "usage: uffd-floor same-cpu|cross-block|cross-spin random|sequential "
                        "[pages [idle-poll]]\n");
        return 2;
    }
    int latency_fd = -1; // closing it (at exit) drops the request
    if (idle_poll) {
        const int32_t zero = 0;
        latency_fd = open("/dev/cpu_dma_latency", O_WRONLY | O_CLOEXEC);
        if (latency_fd < 0 || write(latency_fd, &zero, sizeof zero) != ssize_t(sizeof zero)) {
            perror("/dev/cpu_dma_latency");
            return 1;
        }
    }
    const int uffd = int(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (uffd < 0) {
        perror("userfaultfd");
        return 1;
    }
    uffdio_api api{UFFD_API, 0, 0};
    ioctl(uffd, UFFDIO_API, &api);
    char* region = static_cast<char*>(
        mmap(nullptr, pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    uffdio_register reg{
        {reinterpret_cast<uint64_t>(region), pages * 4096}, UFFDIO_REGISTER_MODE_MISSING, 0};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg)) {
        perror("UFFDIO_REGISTER");
        return 1;
    }
    static char page[4096] __attribute__((aligned(4096)));
    memset(page, 0x5a, sizeof page);
    const int toucher_cpu = 0;
    const int handler_cpu = mode == "same-cpu" ? 0 : 1;
    std::thread h(handler, uffd, page, handler_cpu, mode == "cross-spin");
    pin(toucher_cpu);
    std::vector<uint32_t> idx(pages);
    for (size_t i = 0; i < pages; i++)
        idx[i] = uint32_t(i);
    if (order == "random")
        std::shuffle(idx.begin(), idx.end(), std::minstd_rand(7));
    std::vector<uint64_t> lat(pages);
    for (size_t i = 0; i < pages; i++) {
        const uint64_t t0 = now_ns();
        (void)*const_cast<volatile char*>(region + size_t(idx[i]) * 4096);
        lat[i] = now_ns() - t0;
    }
    done = true;
    h.join();
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double q) {
        return double(lat[std::min(pages - 1, size_t(q * double(pages)))]) / 1e3;
    };
    if (latency_fd >= 0)
        close(latency_fd);
    printf("floor mode=%s%s order=%s pages=%zu p50_us=%.2f p99_us=%.2f p999_us=%.2f max_us=%.2f\n",
           mode.c_str(), idle_poll ? " idle-poll" : "", order.c_str(), pages, pct(0.5), pct(0.99),
           pct(0.999), double(lat.back()) / 1e3);
    return 0;
}
