// Raw throughput of each transport, to set Ferry's background transfer
// against: what the link itself carries, without Ferry's protocol, landing
// in fresh memory on the receiving side as a migration's pages must (on a
// VM, first touches of guest memory are a large part of the cost).
//   raw-throughput tcp-sink IP:PORT            accept one connection, discard what arrives
//   raw-throughput tcp-send IP:PORT MIB [from-memory]
//        send MIB MiB, print GB/s; from-memory: first fill MIB of fresh
//        memory and send from it, as a migration's source holds and reads its
//        workload's memory (on a VM that also leaves the guest's memory in the
//        state a move finds it: the source's pages taken, the destination's
//        fresh)
//   raw-throughput shm MIB [lat_ns ns_per_byte]
//        one-sided reads of 1 MiB from a shared-memory region into private
//        memory (what the shm fabric does per request), with the link model
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace {

double now() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return double(t.tv_sec) + double(t.tv_nsec) / 1e9;
}

sockaddr_in parse(const char* text) {
    std::string s(text);
    auto colon = s.rfind(':');
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(std::atoi(s.c_str() + colon + 1)));
    inet_pton(AF_INET, s.substr(0, colon).c_str(), &a.sin_addr);
    return a;
}

} // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "tcp-sink" && argc == 3) {
        int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a = parse(argv[2]);
        if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) || listen(l, 1)) {
            perror("bind/listen");
            return 1;
        }
        printf("ready\n");
        fflush(stdout);
        int c = accept(l, nullptr, nullptr);
        // Receive into fresh memory, 1 MiB at a time, as pages land in a
        // migrated process.
        const size_t cap = size_t(64) << 30;
        char* mem = static_cast<char*>(mmap(nullptr, cap, PROT_READ | PROT_WRITE,
                                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        size_t off = 0;
        for (;;) {
            ssize_t n = read(c, mem + off, 1 << 20);
            if (n <= 0)
                break;
            off += size_t(n);
        }
        return 0;
    }
    if (mode == "tcp-send" && (argc == 4 || (argc == 5 && std::string(argv[4]) == "from-memory"))) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a = parse(argv[2]);
        if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a)) {
            perror("connect");
            return 1;
        }
        const size_t total = size_t(std::atol(argv[3])) << 20;
        const bool from_memory = argc == 5;
        std::vector<char> buf(1 << 20, 'x');
        char* memory = nullptr;
        if (from_memory) {
            memory = static_cast<char*>(
                mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
            if (memory == MAP_FAILED) {
                perror("mmap");
                return 1;
            }
            memset(memory, 'x', total);
        }
        const double t0 = now();
        for (size_t sent = 0; sent < total;) {
            const char* from = from_memory ? memory + sent : buf.data();
            ssize_t n = write(s, from, std::min(buf.size(), total - sent));
            if (n <= 0) {
                perror("write");
                return 1;
            }
            sent += size_t(n);
        }
        shutdown(s, SHUT_WR);
        char c;
        while (read(s, &c, 1) > 0) {
        }
        printf("raw tcp_gbytes_per_s=%.3f\n", double(total) / (now() - t0) / 1e9);
        return 0;
    }
    if (mode == "shm" && argc >= 3) {
        const size_t total = size_t(std::atol(argv[2])) << 20;
        const double lat_ns = argc > 3 ? std::atof(argv[3]) : 0,
                     ns_per_byte = argc > 4 ? std::atof(argv[4]) : 0;
        int fd = open("/dev/shm/ferry-raw-throughput", O_RDWR | O_CREAT | O_TRUNC, 0600);
        unlink("/dev/shm/ferry-raw-throughput");
        if (fd < 0 || ftruncate(fd, off_t(total))) {
            perror("shm");
            return 1;
        }
        char* region = static_cast<char*>(
            mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0));
        memset(region, 'x', total);
        char* dst = static_cast<char*>(
            mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        const size_t step = 1 << 20;
        const double t0 = now();
        for (size_t off = 0; off < total; off += step) {
            const double start = now();
            memcpy(dst + off, region + off, step); // into fresh memory
            const double until = start + (lat_ns + double(step) * ns_per_byte) / 1e9;
            while (now() < until) {
            }
        }
        printf("raw shm_gbytes_per_s=%.3f\n", double(total) / (now() - t0) / 1e9);
        return 0;
    }
    fprintf(stderr,
            "usage: raw-throughput tcp-sink IP:PORT | tcp-send IP:PORT MIB [from-memory] | shm MIB "
            "[lat_ns ns_per_byte]\n");
    return 2;
}
