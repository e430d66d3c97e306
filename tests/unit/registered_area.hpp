// `pages` of private anonymous memory registered for missing faults with a
// uffd of its own that asks for no events, unmapped at the end. Nothing may
// touch a page of it before a copy lands there: the fault would block the
// test. The uffd is not UFFD_USER_MODE_ONLY, so the kernel's own reads of
// the memory fault into it too.
#pragma once

#include "core/page.hpp"
#include "core/unique_fd.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

namespace ferry::test {

struct registered_area {
    size_t pages;
    unsigned char* mem = nullptr;
    uint64_t addr = 0;
    unique_fd uffd;

    explicit registered_area(size_t n) : pages(n) {
        void* m = ::mmap(nullptr, pages * page_size, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        REQUIRE(m != MAP_FAILED);
        mem = static_cast<unsigned char*>(m);
        addr = reinterpret_cast<uint64_t>(m);
        uffd.reset(int(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK)));
        REQUIRE(uffd);
        uffdio_api api{UFFD_API, 0, 0};
        REQUIRE(::ioctl(uffd.get(), UFFDIO_API, &api) == 0);
        uffdio_register reg{{addr, pages * page_size}, UFFDIO_REGISTER_MODE_MISSING, 0};
        REQUIRE(::ioctl(uffd.get(), UFFDIO_REGISTER, &reg) == 0);
    }
    registered_area(const registered_area&) = delete;
    registered_area& operator=(const registered_area&) = delete;
    ~registered_area() {
        if (mem)
            ::munmap(mem, pages * page_size);
    }
};

} // namespace ferry::test
