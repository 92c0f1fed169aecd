// io::available_memory and its parts: /proc/meminfo's MemAvailable, the byte formatting used
// in the memory messages, and the environment override the tests rely on.
#include <gtest/gtest.h>

#include <cstdlib>

#include "hpctrain/io/system_memory.hpp"

namespace io = hpctrain::io;

TEST(SystemMemory, ParsesMemAvailable) {
  EXPECT_EQ(io::parse_mem_available("MemTotal:       24683584 kB\nMemFree:  1 kB\nMemAvailable:   23105336 kB\n"),
            std::uint64_t{23105336} * 1024);
  EXPECT_EQ(io::parse_mem_available("MemTotal: 5 kB\n"), 0u);
}

TEST(SystemMemory, FormatsBytes) {
  EXPECT_EQ(io::format_bytes(512), "512 B");
  EXPECT_EQ(io::format_bytes(3 * 1024), "3.0 KiB");
  EXPECT_EQ(io::format_bytes(64.0 * (1ull << 30)), "64.0 GiB");
  EXPECT_EQ(io::format_bytes(1.5 * (1ull << 40)), "1.5 TiB");
}

TEST(SystemMemory, ReadsThisMachine) {
  ::unsetenv("HPCTRAIN_MEMORY_AVAILABLE_BYTES");
  const io::AvailableMemory a = io::available_memory();
  ASSERT_TRUE(a.known()) << a.source;  // Linux: /proc/meminfo is there
  EXPECT_GT(a.bytes, std::uint64_t{16} << 20);
}

TEST(SystemMemory, EnvironmentOverride) {
  ::setenv("HPCTRAIN_MEMORY_AVAILABLE_BYTES", "12345", 1);
  const io::AvailableMemory a = io::available_memory();
  ::unsetenv("HPCTRAIN_MEMORY_AVAILABLE_BYTES");
  EXPECT_EQ(a.bytes, 12345u);
  EXPECT_EQ(a.source, "HPCTRAIN_MEMORY_AVAILABLE_BYTES");
}

TEST(SystemMemory, ReadsCgroupMemoryStat) {
  const std::string v1 = "cache 9715712\ninactive_file 135168\ntotal_inactive_file 277016576\ntotal_rss 8\n";
  EXPECT_EQ(io::stat_value(v1, "total_inactive_file"), 277016576u);
  EXPECT_EQ(io::stat_value(v1, "inactive_file"), 135168u);  // not the total_ line
  EXPECT_EQ(io::stat_value(v1, "inactive"), 0u);            // whole keys only
  EXPECT_EQ(io::stat_value("anon 5\nfile 6\n", "inactive_file"), 0u);
}
