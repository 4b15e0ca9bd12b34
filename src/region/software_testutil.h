// Test helpers shared by the coherence=software tests (software_test.cc,
// software_multiprocess_test.cc, and delegate_test.cc's software-mode case).
// Header-only.

#ifndef CXLKV_SRC_REGION_SOFTWARE_TESTUTIL_H_
#define CXLKV_SRC_REGION_SOFTWARE_TESTUTIL_H_

#include <cstdint>

#include "gtest/gtest.h"
#include "testutil.h"
#include "visibility/visibility.h"

// Software mode needs the CPU's visibility layer (x86-64 only); elsewhere
// Open refuses it with kUnsupported and these tests do not apply.
#define CXLKV_NEED_VISIBILITY()                                                  \
  do {                                                                           \
    if (::cxlkv::internal::NewCpuVisibility() == nullptr)                        \
      GTEST_SKIP() << "no visibility layer for this architecture (x86-64 only)"; \
  } while (0)

namespace cxlkv::test {

// TestOptions(size, slot) in coherence=software with `partitions` write
// partitions, attaching as the holder of `partition`.
inline RegionOptions SoftwareOptions(uint64_t size, uint64_t slot, uint32_t partitions,
                                     int32_t partition) {
  RegionOptions o = TestOptions(size, slot);
  o.config.coherence = CoherenceMode::kSoftware;
  o.config.software_partitions = partitions;
  o.software_partition = partition;
  return o;
}

}  // namespace cxlkv::test

#endif  // CXLKV_SRC_REGION_SOFTWARE_TESTUTIL_H_
