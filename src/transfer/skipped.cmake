# Included by the top-level CMakeLists when -DCXLKV_CUDA=OFF (CPU builds and
# CI): the CPU half of the GPU data path still builds and runs (the CRC32C
# combine arithmetic the GPU kernels use, the piece lists of vLLM's KV
# layout), and the GPU tests are registered as skipped, with the reason,
# instead of silently vanishing.
if(GTest_FOUND)
  add_library(cxlkv_kv_layout STATIC ${CMAKE_CURRENT_LIST_DIR}/kv_layout.cc)
  target_include_directories(cxlkv_kv_layout PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(cxlkv_kv_layout PUBLIC cxlkv)
  cxlkv_test(kv_layout_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_layout_test.cc
             LIBS cxlkv_kv_layout LABELS transfer.unit)
  cxlkv_test(crc32c_math_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/crc32c_math_test.cc
             LIBS cxlkv_internal LABELS transfer.unit)
  target_include_directories(crc32c_math_test PRIVATE ${CMAKE_CURRENT_LIST_DIR})
endif()
foreach(t gpu_transfer_test region_gpu_test)
  add_test(NAME ${t}_skipped COMMAND ${CMAKE_COMMAND} -E echo
    "SKIPPED ${t}: built without CUDA (-DCXLKV_CUDA=OFF). On a GPU machine run: scripts/gpu.sh")
  set_tests_properties(${t}_skipped PROPERTIES
    SKIP_REGULAR_EXPRESSION "SKIPPED" LABELS "transfer.gpu")
endforeach()
