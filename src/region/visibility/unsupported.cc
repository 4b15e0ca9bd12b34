// Copyright cxlkv authors.
//
// Architectures without a visibility layer (arm64 and the portable
// -DCXLKV_GENERIC_ARCH=ON build): arm64's DC CVAC / DC CIVAC + DSB have not
// been built and tested here, so coherence=software is refused there.
#include "visibility.h"

namespace cxlkv::internal {

std::unique_ptr<Visibility> NewCpuVisibility() { return nullptr; }

}  // namespace cxlkv::internal
