// The VMA flags check of --smaps-before-freeze (criu/vma_flags.hpp): smaps
// parsing, CRIU's VmFlags table, and the comparison with dumped VMAs.
#include "criu/vma_flags.hpp"

#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <unistd.h>

using namespace ferry;

namespace {

constexpr uint64_t bit(int madvise) {
    return uint64_t(1) << madvise;
}

const char* const smaps_text =
    "55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 5309136    /usr/bin/x\n"
    "Size:                  8 kB\n"
    "Rss:                   8 kB\n"
    "VmFlags: rd mr mw me dw sd \n"
    "7f0000000000-7f0040000000 rw-p 00000000 00:00 0 \n"
    "Rss:             1048576 kB\n"
    "THPeligible:    0\n"
    "VmFlags: rd wr mr mw me ac sd dd hg rr \n"
    "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0          [stack]\n"
    "VmFlags: rd wr mr mw me gd ac lo nr dc mg nh sr \n";

} // namespace

TEST_CASE("VmFlags map to the flags CRIU restores", "[vma_flags]") {
    using criu::parse_vmflags;
    CHECK(parse_vmflags(" rd wr mr mw me ac sd ") == criu::vma_flags{});
    CHECK(parse_vmflags("gd lo nr").map_flags == (0x0100u | 0x2000u | 0x4000u));
    CHECK(parse_vmflags("sr rr dc dd mg hg nh").madv ==
          (bit(2) | bit(1) | bit(10) | bit(16) | bit(12) | bit(14) | bit(15)));
    // Tokens match whole: "ddd" or "d" are not "dd".
    CHECK(parse_vmflags("ddd d wf um uw").madv == 0);
}

TEST_CASE("smaps text parses into VMAs with their flags", "[vma_flags]") {
    const auto v = criu::parse_smaps(smaps_text);
    REQUIRE(v.size() == 3);
    CHECK(v[0].start == 0x55d0c0a00000);
    CHECK(v[0].end == 0x55d0c0a02000);
    CHECK(v[0].flags == criu::vma_flags{});
    CHECK(v[1].flags.madv == (bit(16) | bit(14) | bit(1)));
    CHECK(v[2].flags.map_flags == (0x0100u | 0x2000u | 0x4000u));
    CHECK(v[2].flags.madv == (bit(10) | bit(12) | bit(15) | bit(2)));

    CHECK_THROWS(criu::parse_smaps("VmFlags: rd\n"));
    CHECK_THROWS(criu::parse_smaps("2000-3000 r--p 0 0:0 0\n1000-2000 r--p 0 0:0 0\n"));
}

TEST_CASE("dumped VMAs are compared with the frozen task's by their end", "[vma_flags]") {
    const auto now = criu::parse_smaps(smaps_text);
    std::vector<criu::vma> dumped = {
        {0x55d0c0a00000, 0x55d0c0a02000, PROT_READ, MAP_PRIVATE, 0, 0},
        {0x7f0000000000, 0x7f0040000000, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, 0,
         bit(16) | bit(14) | bit(1)},
        // CRIU adds a guard page below a stack that grows down: the start
        // differs, the end is the key.
        {0x7ffbfffff000, 0x7ffc00021000, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | 0x0100 | 0x2000 | 0x4000, 0,
         bit(10) | bit(12) | bit(15) | bit(2)},
        // vsyscall is the kernel's and is not compared.
        {0xffffffffff600000, 0xffffffffff601000, PROT_EXEC, MAP_PRIVATE, 1u << 2, 0},
    };
    CHECK(criu::compare_vma_flags(dumped, now).empty());

    SECTION("a madvise between the read and the freeze is seen") {
        dumped[1].madv &= ~bit(16); // dumped without MADV_DONTDUMP
        const auto diff = criu::compare_vma_flags(dumped, now);
        CHECK(diff.find("[0x7f0000000000, 0x7f0040000000)") != std::string::npos);
        CHECK(diff.find("madvise") != std::string::npos);
    }
    SECTION("an mlock is seen") {
        dumped[2].flags &= ~0x2000u;
        CHECK_FALSE(criu::compare_vma_flags(dumped, now).empty());
    }
    SECTION("flags CRIU sets from elsewhere are not compared") {
        dumped[1].flags |= MAP_HUGETLB | MAP_SHARED;
        CHECK(criu::compare_vma_flags(dumped, now).empty());
    }
    SECTION("a dumped VMA the frozen task lacks is reported") {
        dumped.insert(dumped.begin() + 1, {0x60000000, 0x60001000, 0, MAP_PRIVATE, 0, 0});
        CHECK(criu::compare_vma_flags(dumped, now).find("no longer a VMA") != std::string::npos);
    }
}

TEST_CASE("this process's own smaps reads, with a madvise flag seen", "[vma_flags]") {
    const size_t len = 16 * 4096;
    void* m = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    REQUIRE(::madvise(m, len, MADV_DONTDUMP) == 0);
    const auto start = reinterpret_cast<uint64_t>(m);
    const auto v = criu::read_smaps(::getpid());
    bool found = false;
    for (const auto& s : v)
        if (s.start <= start && start + len <= s.end)
            found = (s.flags.madv & bit(16)) != 0;
    ::munmap(m, len);
    CHECK(found);
}
