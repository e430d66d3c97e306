// CRIU image reading: synthetic images for the edge cases, and images that
// CRIU itself writes while this test runs.
#include "criu/criu_image.hpp"
#include "criu/criu_images.pb-c.h"
#include "criu/restore_network_lock.hpp"
#include "temp_dir.hpp"

#include <catch2/catch.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace ferry::criu;
namespace fs = std::filesystem;

namespace {

// Builds the bytes of an image file: magics, then {u32 len, packed message}*.
class image_writer {
  public:
    explicit image_writer(uint32_t type_magic) {
        if (type_magic != inventory_magic)
            put_u32(common_magic);
        put_u32(type_magic);
    }
    template <typename Msg, typename Pack, typename Size>
    image_writer& add(const Msg& m, Pack pack, Size size) {
        std::vector<uint8_t> buf(size(&m));
        pack(&m, buf.data());
        put_u32(uint32_t(buf.size()));
        bytes.insert(bytes.end(), buf.begin(), buf.end());
        return *this;
    }
    void put_u32(uint32_t v) {
        uint8_t b[4];
        std::memcpy(b, &v, 4);
        bytes.insert(bytes.end(), b, b + 4);
    }
    std::vector<uint8_t> bytes;
};

image_writer pagemap_file(std::initializer_list<pagemap_entry> entries) {
    image_writer w(pagemap_magic);
    CriuImage__PagemapHead head = CRIU_IMAGE__PAGEMAP_HEAD__INIT;
    head.pages_id = 3;
    w.add(head, criu_image__pagemap_head__pack, criu_image__pagemap_head__get_packed_size);
    for (const auto& e : entries) {
        CriuImage__PagemapEntry pe = CRIU_IMAGE__PAGEMAP_ENTRY__INIT;
        pe.vaddr = e.vaddr;
        pe.nr_pages = e.nr_pages;
        pe.has_flags = true;
        pe.flags = e.flags;
        w.add(pe, criu_image__pagemap_entry__pack, criu_image__pagemap_entry__get_packed_size);
    }
    return w;
}

constexpr uint32_t anon_private = MAP_ANONYMOUS | MAP_PRIVATE;

} // namespace

TEST_CASE("pagemap images parse", "[images]") {
    auto w = pagemap_file(
        {{0x1000, 2, pe_lazy}, {0x3000, 1, pe_present}, {0x8000, 4, pe_lazy | pe_present}});
    auto pm = parse_pagemap(w.bytes, "pagemap-1.img");
    REQUIRE(pm.pages_id == 3);
    REQUIRE(pm.entries.size() == 3);
    REQUIRE(pm.entries[0].lazy());
    REQUIRE_FALSE(pm.entries[1].lazy());
    REQUIRE(pm.entries[2].end() == 0xc000);
}

TEST_CASE("corrupt pagemap images are rejected with the file named", "[images]") {
    auto good = pagemap_file({{0x1000, 2, pe_lazy}}).bytes;
    SECTION("bad common magic") {
        auto b = good;
        b[0] ^= 1;
        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"),
                            Catch::Contains("pagemap-7.img: bad common magic"));
    }
    SECTION("wrong image type") {
        auto b = good;
        b[4] ^= 1;
        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"), Catch::Contains("bad image magic"));
    }
    SECTION("truncated entry") {
        auto b = good;
        b.resize(b.size() - 2);
        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"), Catch::Contains("overruns"));
    }
    SECTION("entry length too large") {
        auto b = good;
        uint32_t huge = 0x7fffffff;
        std::memcpy(b.data() + 8, &huge, 4);
        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"), Catch::Contains("overruns"));
    }
    SECTION("garbage protobuf") {
        auto b = good;
        uint32_t head_len;
        std::memcpy(&head_len, b.data() + 8, 4);
        for (size_t i = 12; i < 12 + head_len; i++)
            b[i] = 0xff; // an unterminated varint

        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"), Catch::Contains("does not decode"));
    }
    SECTION("entries out of order") {
        auto b = pagemap_file({{0x5000, 2, pe_lazy}, {0x1000, 1, pe_lazy}}).bytes;
        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"), Catch::Contains("out of order"));
    }
    SECTION("unaligned address") {
        auto b = pagemap_file({{0x1001, 2, pe_lazy}}).bytes;
        REQUIRE_THROWS_WITH(parse_pagemap(b, "pagemap-7.img"), Catch::Contains("malformed"));
    }
    SECTION("empty file") {
        REQUIRE_THROWS(parse_pagemap({}, "pagemap-7.img"));
    }
}

TEST_CASE("lazy ranges split at VMA boundaries", "[images]") {
    pagemap pm;
    pm.entries = {{0x1000, 4, pe_lazy}, {0x5000, 1, pe_present}, {0x6000, 4, pe_lazy}};
    std::vector<vma> vmas = {{0x1000, 0x3000, 3, anon_private, 0},
                             {0x3000, 0x8000, 3, anon_private, 0},
                             {0x8000, 0xa000, 3, anon_private, 0}};
    auto ranges = compute_lazy_ranges(pm, vmas, "pagemap-1.img");
    REQUIRE(ranges == std::vector<lazy_range>{
                          {0x1000, 0x3000}, {0x3000, 0x5000}, {0x6000, 0x8000}, {0x8000, 0xa000}});

    SECTION("a lazy page outside every VMA") {
        pm.entries = {{0xa000, 1, pe_lazy}};
        REQUIRE_THROWS_WITH(compute_lazy_ranges(pm, vmas, "p"),
                            Catch::Contains("outside every VMA"));
    }
    SECTION("a lazy page in a VMA that cannot be lazy") {
        std::vector<vma> shared = {{0x1000, 0x9000, 3, MAP_SHARED | MAP_ANONYMOUS, 0}};
        REQUIRE_THROWS_WITH(compute_lazy_ranges(pm, shared, "p"),
                            Catch::Contains("cannot be lazy"));
        std::vector<vma> vdso = {{0x1000, 0x9000, 3, anon_private, vma_area_vdso}};
        REQUIRE_THROWS(compute_lazy_ranges(pm, vdso, "p"));
    }
}

TEST_CASE("a restore whose copy Ferry keeps unreachable locks nothing", "[images]") {
    ferry::test::temp_dir dir;
    CriuImage__InventoryEntry ie = CRIU_IMAGE__INVENTORY_ENTRY__INIT;
    ie.img_version = 2;
    ie.has_network_lock_method = true;
    ie.network_lock_method = 2; // nftables
    std::vector<uint8_t> entry(criu_image__inventory_entry__get_packed_size(&ie));
    criu_image__inventory_entry__pack(&ie, entry.data());
    // Fields of CRIU's inventory that Ferry's schema lacks: lsmtype (6) = 1
    // and dump_criu_run_id (13) = "abc". They must come through unchanged.
    const std::vector<uint8_t> unknown = {0x30, 0x01, 0x6a, 0x03, 'a', 'b', 'c'};
    entry.insert(entry.end(), unknown.begin(), unknown.end());
    image_writer inv(inventory_magic);
    inv.put_u32(uint32_t(entry.size()));
    inv.bytes.insert(inv.bytes.end(), entry.begin(), entry.end());
    {
        std::ofstream out(dir.path / "inventory.img", std::ios::binary);
        out.write(reinterpret_cast<const char*>(inv.bytes.data()),
                  std::streamsize(inv.bytes.size()));
    }
    skip_restore_network_lock(dir.path);
    std::ifstream in(dir.path / "inventory.img", std::ios::binary);
    const std::vector<uint8_t> file{std::istreambuf_iterator<char>(in),
                                    std::istreambuf_iterator<char>()};
    const auto entries = split_entries(file, inventory_magic, "inventory.img");
    REQUIRE(entries.size() == 1);
    auto* back = criu_image__inventory_entry__unpack(nullptr, entries[0].size(), entries[0].data());
    REQUIRE(back);
    CHECK(back->img_version == 2);
    CHECK(back->has_network_lock_method);
    CHECK(back->network_lock_method == 3); // CRIU's skip
    criu_image__inventory_entry__free_unpacked(back, nullptr);
    CHECK(std::search(entries[0].begin(), entries[0].end(), unknown.begin(), unknown.begin() + 2) !=
          entries[0].end());
    CHECK(std::search(entries[0].begin(), entries[0].end(), unknown.begin() + 2, unknown.end()) !=
          entries[0].end());
    CHECK(parse_inventory(file).img_version == 2);
    CHECK_FALSE(fs::exists(dir.path / "inventory.img.ferry"));

    std::ofstream(dir.path / "inventory.img", std::ios::binary | std::ios::trunc) << "garbage";
    CHECK_THROWS_AS(skip_restore_network_lock(dir.path), image_error);
}

TEST_CASE("inventory and pstree images", "[images]") {
    image_writer inv(inventory_magic);
    CriuImage__InventoryEntry ie = CRIU_IMAGE__INVENTORY_ENTRY__INIT;
    ie.img_version = 2;
    inv.add(ie, criu_image__inventory_entry__pack, criu_image__inventory_entry__get_packed_size);
    REQUIRE(parse_inventory(inv.bytes).img_version == 2);

    image_writer old(inventory_magic);
    ie.img_version = 1;
    old.add(ie, criu_image__inventory_entry__pack, criu_image__inventory_entry__get_packed_size);
    REQUIRE_THROWS_WITH(parse_inventory(old.bytes), Catch::Contains("version 1"));

    image_writer ps(pstree_magic);
    uint32_t threads[] = {1, 5};
    CriuImage__PstreeEntry root = CRIU_IMAGE__PSTREE_ENTRY__INIT;
    root.pid = 1;
    root.n_threads = 2;
    root.threads = threads;
    CriuImage__PstreeEntry child = CRIU_IMAGE__PSTREE_ENTRY__INIT;
    child.pid = 2;
    child.ppid = 1;
    ps.add(root, criu_image__pstree_entry__pack, criu_image__pstree_entry__get_packed_size);
    ps.add(child, criu_image__pstree_entry__pack, criu_image__pstree_entry__get_packed_size);
    auto tasks = parse_pstree(ps.bytes);
    REQUIRE(tasks.size() == 2);
    REQUIRE(tasks[0].threads == std::vector<uint32_t>{1, 5});
    REQUIRE(tasks[1].ppid == 1);

    image_writer orphan(pstree_magic);
    orphan.add(child, criu_image__pstree_entry__pack, criu_image__pstree_entry__get_packed_size);
    REQUIRE_THROWS_WITH(parse_pstree(orphan.bytes), Catch::Contains("not the root"));
}

// Dumps a live memload tree with the installed CRIU and reads what it wrote.
TEST_CASE("images written by CRIU itself", "[images][criu]") {
    const char* memload = std::getenv("FERRY_MEMLOAD");
    REQUIRE(memload != nullptr);
    REQUIRE(::geteuid() == 0);
    const fs::path dir = fs::temp_directory_path() / fmt::format("ferry-image-test-{}", ::getpid());
    fs::create_directories(dir);

    // memload becomes pid 1 of a new PID namespace, as Ferry requires. Its
    // output goes to a file: CRIU would refuse a pipe to outside the tree.
    const fs::path out = dir / "memload.out";
    pid_t launcher = ::fork();
    REQUIRE(launcher >= 0);
    if (launcher == 0) {
        int null = ::open("/dev/null", O_RDWR);
        int log = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(null, 0);
        ::dup2(log, 1);
        ::dup2(log, 2);
        ::execlp("unshare", "unshare", "--pid", "--fork", memload, "--mib", "8", "--child-mib", "2",
                 nullptr);
        ::_exit(127);
    }
    // Ready once both processes have filled their memory and said so.
    auto both_ready = [&] {
        std::ifstream in(out);
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        return text.find("ready parent") != std::string::npos &&
               text.find("ready child") != std::string::npos;
    };
    for (int i = 0; i < 1000 && !both_ready(); i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(both_ready());
    pid_t root = -1;
    std::ifstream(fmt::format("/proc/{}/task/{}/children", launcher, launcher)) >> root;
    REQUIRE(root > 0);

    const std::string cmd =
        fmt::format("criu dump -t {} -D {} -R -o dump.log >/dev/null 2>&1", root, dir.string());
    const int rc = std::system(cmd.c_str());
    ::kill(launcher, SIGKILL);
    ::kill(root, SIGKILL);
    ::waitpid(launcher, nullptr, 0);
    REQUIRE(rc == 0);

    auto set = image_set::load(dir);
    REQUIRE(set.inv.img_version == supported_img_version);
    REQUIRE(set.tasks.size() == 2);
    REQUIRE(set.tasks[0].pid == 1);            // the PID namespace's init
    REQUIRE(set.tasks[0].threads.size() >= 3); // main thread and two workers
    REQUIRE(set.tasks[1].ppid == 1);
    REQUIRE(set.processes.size() == 2);
    // An ordinary dump marks lazy-able pages PE_LAZY|PE_PRESENT; the parent's
    // 8 MiB region and the child's 2 MiB are among them.
    REQUIRE(set.find(1)->lazy_pages() >= 8 * 256);
    REQUIRE(set.find(2)->lazy_pages() >= 2 * 256);
    for (const auto& p : set.processes)
        for (const auto& r : p.lazy) {
            bool inside = false;
            for (const auto& v : p.vmas)
                inside |= r.start >= v.start && r.end <= v.end && v.lazy_capable();
            REQUIRE(inside);
        }
    fs::remove_all(dir);
}
