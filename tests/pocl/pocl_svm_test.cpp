// Coarse-grained buffer SVM on memlayer devices (doc/svm.md), through the
// ICD loader, on every device of the platform (run on one and on two
// memlayer devices): allocation, maps, memcpy and fill, kernels on whole
// allocations and on pointers into them, pointers stored inside SVM buffers
// and followed by kernels on every device, buffers made over SVM bytes,
// enqueued frees, and the requests a user gets wrong. Every byte read back
// is compared with a host model.
//
// SvmOff runs alone (--gtest_filter=SvmOff.*) on devices given svm_space=0,
// with MEMLAYER_EXPECT_SVM=0: they report no SVM and no allocation is made.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "cl_check.hpp"

using namespace memlayer::cltest;

namespace {

constexpr const char* kSource = R"CLC(
kernel void add(global int* p, int v) { p[get_global_id(0)] += v; }

typedef struct Node { global struct Node* next; int value; } Node;
kernel void walk(global Node* head, global int* out) {
  int sum = 0;
  for (global Node* n = head; n != 0; n = n->next) sum += n->value;
  *out = sum;
}

// Each entry of `table` points into another allocation.
kernel void gather(global int* global* table, global int* out) {
  size_t i = get_global_id(0);
  out[i] = *table[i];
}
)CLC";

bool expect_svm() {
  const char* e = std::getenv("MEMLAYER_EXPECT_SVM");
  return e == nullptr || std::string(e) != "0";
}

class Svm : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = all_devices();
    ASSERT_FALSE(devices_.empty());
    cl_int err = CL_SUCCESS;
    ctx_ = Context(clCreateContext(nullptr, static_cast<cl_uint>(devices_.size()), devices_.data(), nullptr, nullptr,
                                   &err));
    CL_CHECK(err);
    for (cl_device_id d : devices_) {
      queues_.emplace_back(clCreateCommandQueueWithProperties(ctx_.get(), d, nullptr, &err));
      CL_CHECK(err);
    }
    program_ = build_program(ctx_.get(), devices_, kSource);
    add_ = kernel("add");
    walk_ = kernel("walk");
    gather_ = kernel("gather");
  }

  Kernel kernel(const char* name) {
    cl_int err = CL_SUCCESS;
    Kernel k(clCreateKernel(program_.get(), name, &err));
    CL_CHECK(err);
    return k;
  }

  // An SVM allocation freed with the fixture.
  template <class T>
  T* alloc(std::size_t count) {
    void* p = clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, count * sizeof(T), 0);
    EXPECT_NE(p, nullptr);
    if (p != nullptr) owned_.push_back(p);
    return static_cast<T*>(p);
  }

  void TearDown() override {
    for (auto& q : queues_) CL_CHECK(clFinish(q.get()));
    for (void* p : owned_) clSVMFree(ctx_.get(), p);
  }

  // p[i] += v for i in [0, n), on device d's queue; waits for it.
  void add_on(std::size_t d, int* p, std::size_t n, int v) {
    CL_CHECK(clSetKernelArgSVMPointer(add_.get(), 0, p));
    CL_CHECK(clSetKernelArg(add_.get(), 1, sizeof v, &v));
    CL_CHECK(clEnqueueNDRangeKernel(queues_[d].get(), add_.get(), 1, nullptr, &n, nullptr, 0, nullptr, nullptr));
    CL_CHECK(clFinish(queues_[d].get()));
  }

  // The host's view of [p, p + n) through a blocking read map.
  std::vector<int> mapped(std::size_t d, int* p, std::size_t n) {
    CL_CHECK(clEnqueueSVMMap(queues_[d].get(), CL_TRUE, CL_MAP_READ, p, n * sizeof(int), 0, nullptr, nullptr));
    std::vector<int> v(p, p + n);
    CL_CHECK(clEnqueueSVMUnmap(queues_[d].get(), p, 0, nullptr, nullptr));
    CL_CHECK(clFinish(queues_[d].get()));
    return v;
  }

  std::vector<cl_device_id> devices_;
  Context ctx_;
  std::vector<Queue> queues_;
  Program program_;
  Kernel add_, walk_, gather_;
  std::vector<void*> owned_;
};

// (Beside PoCL's CPU device, which shares the host's memory and reports
// more, the memlayer devices only.)
TEST_F(Svm, DevicesReportCoarseGrainedBuffersOnly) {
  std::size_t memlayer_devices = 0;
  for (cl_device_id d : devices_) {
    std::string name(256, '\0');
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_NAME, name.size(), name.data(), nullptr));
    if (name.find("memlayer") == std::string::npos) continue;
    ++memlayer_devices;
    cl_device_svm_capabilities caps = 0;
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof caps, &caps, nullptr));
    EXPECT_EQ(caps, static_cast<cl_device_svm_capabilities>(CL_DEVICE_SVM_COARSE_GRAIN_BUFFER));
  }
  EXPECT_GT(memlayer_devices, 0u) << "no memlayer device to ask (POCL_DEVICES names one in every run of this test)";
}

// Written on the host through a map, changed by a kernel on each device in
// turn (a whole allocation, then a pointer into it), read through maps.
TEST_F(Svm, MapsAndKernelsOnEveryDevice) {
  constexpr std::size_t kN = 1 << 16;
  int* p = alloc<int>(kN);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 128, 0u);
  CL_CHECK(clEnqueueSVMMap(queues_[0].get(), CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, p, kN * sizeof(int), 0,
                           nullptr, nullptr));
  std::iota(p, p + kN, 0);
  CL_CHECK(clEnqueueSVMUnmap(queues_[0].get(), p, 0, nullptr, nullptr));
  std::vector<int> model(kN);
  std::iota(model.begin(), model.end(), 0);
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    add_on(d, p, kN, static_cast<int>(d) + 1);
    for (int& m : model) m += static_cast<int>(d) + 1;
    add_on(d, p + 1000, 5000, 100);  // a pointer into the allocation
    for (std::size_t i = 1000; i < 6000; ++i) model[i] += 100;
    const std::size_t reader = (d + 1) % devices_.size();
    EXPECT_EQ(mapped(reader, p, kN), model) << "after device " << d << ", read on device " << reader;
  }
}

// Host to SVM, SVM to SVM (on another device), fills with 4- and 16-byte
// patterns over a sub-range, SVM to host.
TEST_F(Svm, MemcpyAndFillMoveExactlyTheirBytes) {
  constexpr std::size_t kN = 4096;
  int* a = alloc<int>(kN);
  int* b = alloc<int>(kN);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<int> src(kN);
  std::iota(src.begin(), src.end(), 7);
  cl_command_queue q0 = queues_[0].get();
  cl_command_queue q1 = queues_.back().get();
  CL_CHECK(clEnqueueSVMMemcpy(q0, CL_TRUE, a, src.data(), kN * sizeof(int), 0, nullptr, nullptr));
  const int zero = 0;
  CL_CHECK(clEnqueueSVMMemFill(q1, b, &zero, sizeof zero, kN * sizeof(int), 0, nullptr, nullptr));
  CL_CHECK(clEnqueueSVMMemcpy(q1, CL_TRUE, b + 100, a + 200, 1000 * sizeof(int), 0, nullptr, nullptr));
  const int four = -5;
  CL_CHECK(clEnqueueSVMMemFill(q0, b + 2000, &four, sizeof four, 64 * sizeof(int), 0, nullptr, nullptr));
  const cl_int4 sixteen = {{1, 2, 3, 4}};
  CL_CHECK(clEnqueueSVMMemFill(q1, b + 3000, &sixteen, sizeof sixteen, 40 * sizeof(int), 0, nullptr, nullptr));
  CL_CHECK(clFinish(q0));
  CL_CHECK(clFinish(q1));
  std::vector<int> back(kN, -1);
  CL_CHECK(clEnqueueSVMMemcpy(q0, CL_TRUE, back.data(), b, kN * sizeof(int), 0, nullptr, nullptr));
  std::vector<int> model(kN, 0);
  std::copy(src.begin() + 200, src.begin() + 1200, model.begin() + 100);
  std::fill(model.begin() + 2000, model.begin() + 2064, -5);
  for (std::size_t i = 0; i < 40; ++i) model[3000 + i] = static_cast<int>(i % 4) + 1;
  EXPECT_EQ(back, model);
  EXPECT_EQ(mapped(0, a, kN), src) << "the source is unchanged";
}

// A linked list whose nodes lie out of order in one allocation, and a table
// of pointers into a second allocation that the kernel does not get as an
// argument (clSetKernelExecInfo names it): each device follows them.
TEST_F(Svm, KernelsFollowPointersStoredInSvm) {
  struct Node {
    Node* next;
    cl_int value;
  };
  constexpr std::size_t kNodes = 257;
  auto* nodes = alloc<Node>(kNodes);
  auto* values = alloc<int>(kNodes);
  auto* table = alloc<int*>(kNodes);
  auto* out = alloc<int>(kNodes + 1);
  ASSERT_TRUE(nodes != nullptr && values != nullptr && table != nullptr && out != nullptr);
  cl_command_queue q = queues_[0].get();
  CL_CHECK(clEnqueueSVMMap(q, CL_TRUE, CL_MAP_WRITE, nodes, kNodes * sizeof(Node), 0, nullptr, nullptr));
  CL_CHECK(clEnqueueSVMMap(q, CL_TRUE, CL_MAP_WRITE, values, kNodes * sizeof(int), 0, nullptr, nullptr));
  CL_CHECK(clEnqueueSVMMap(q, CL_TRUE, CL_MAP_WRITE, table, kNodes * sizeof(int*), 0, nullptr, nullptr));
  // Visit order: a stride through the array (257 is prime).
  int sum = 0;
  std::size_t at = 0;
  for (std::size_t k = 0; k < kNodes; ++k) {
    const std::size_t next = (at + 91) % kNodes;
    nodes[at].value = static_cast<cl_int>(k * 3 + 1);
    nodes[at].next = k + 1 < kNodes ? &nodes[next] : nullptr;
    sum += nodes[at].value;
    at = next;
  }
  for (std::size_t i = 0; i < kNodes; ++i) {
    values[i] = static_cast<int>(i * i);
    table[i] = &values[kNodes - 1 - i];
  }
  for (void* p : {static_cast<void*>(nodes), static_cast<void*>(values), static_cast<void*>(table)})
    CL_CHECK(clEnqueueSVMUnmap(q, p, 0, nullptr, nullptr));
  CL_CHECK(clFinish(q));

  void* indirect[] = {values};
  CL_CHECK(clSetKernelExecInfo(gather_.get(), CL_KERNEL_EXEC_INFO_SVM_PTRS, sizeof indirect, indirect));
  for (std::size_t d = 0; d < devices_.size(); ++d) {
    cl_command_queue qd = queues_[d].get();
    const int marker = -1;
    CL_CHECK(clEnqueueSVMMemFill(qd, out, &marker, sizeof marker, (kNodes + 1) * sizeof(int), 0, nullptr, nullptr));
    CL_CHECK(clSetKernelArgSVMPointer(walk_.get(), 0, nodes));
    CL_CHECK(clSetKernelArgSVMPointer(walk_.get(), 1, out + kNodes));
    const std::size_t one = 1;
    CL_CHECK(clEnqueueNDRangeKernel(qd, walk_.get(), 1, nullptr, &one, nullptr, 0, nullptr, nullptr));
    CL_CHECK(clSetKernelArgSVMPointer(gather_.get(), 0, table));
    CL_CHECK(clSetKernelArgSVMPointer(gather_.get(), 1, out));
    const std::size_t n = kNodes;
    CL_CHECK(clEnqueueNDRangeKernel(qd, gather_.get(), 1, nullptr, &n, nullptr, 0, nullptr, nullptr));
    CL_CHECK(clFinish(qd));
    const std::vector<int> got = mapped(d, out, kNodes + 1);
    EXPECT_EQ(got[kNodes], sum) << "the list's sum on device " << d;
    for (std::size_t i = 0; i < kNodes; ++i)
      ASSERT_EQ(got[i], static_cast<int>((kNodes - 1 - i) * (kNodes - 1 - i))) << "entry " << i << " on device " << d;
  }
}

// A buffer made over SVM bytes (CL_MEM_USE_HOST_PTR) shares them: a kernel
// writing through the buffer on one device and one writing through the
// pointer on another meet in the same bytes, read either way.
TEST_F(Svm, BuffersOverSvmShareItsBytes) {
  constexpr std::size_t kN = 8192;
  int* p = alloc<int>(kN);
  ASSERT_NE(p, nullptr);
  const int one = 1;
  CL_CHECK(clEnqueueSVMMemFill(queues_[0].get(), p, &one, sizeof one, kN * sizeof(int), 0, nullptr, nullptr));
  CL_CHECK(clFinish(queues_[0].get()));
  cl_int err = CL_SUCCESS;
  // Over the allocation's second half.
  Mem half(clCreateBuffer(ctx_.get(), CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, kN / 2 * sizeof(int), p + kN / 2, &err));
  CL_CHECK(err);
  cl_mem h = half.get();
  const int ten = 10;
  CL_CHECK(clSetKernelArg(add_.get(), 0, sizeof h, &h));
  CL_CHECK(clSetKernelArg(add_.get(), 1, sizeof ten, &ten));
  std::size_t n = kN / 2;
  CL_CHECK(clEnqueueNDRangeKernel(queues_[0].get(), add_.get(), 1, nullptr, &n, nullptr, 0, nullptr, nullptr));
  CL_CHECK(clFinish(queues_[0].get()));
  add_on(devices_.size() - 1, p, kN, 100);  // through the pointer, on the last device

  std::vector<int> model(kN, 101);
  std::fill(model.begin() + kN / 2, model.end(), 111);
  EXPECT_EQ(mapped(0, p, kN), model);
  std::vector<int> through_buffer(kN / 2, -1);
  CL_CHECK(clEnqueueReadBuffer(queues_[0].get(), h, CL_TRUE, 0, kN / 2 * sizeof(int), through_buffer.data(), 0,
                               nullptr, nullptr));
  EXPECT_EQ(through_buffer, std::vector<int>(kN / 2, 111));
}

void CL_CALLBACK free_callback(cl_command_queue, cl_uint count, void* pointers[], void* user_data) {
  auto* freed = static_cast<std::vector<void*>*>(user_data);
  freed->assign(pointers, pointers + count);
}

// clEnqueueSVMFree: with a callback, the callback gets the pointers (and
// frees them); without one, the runtime frees them. Both complete.
TEST_F(Svm, EnqueuedFreesComplete) {
  void* a = clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, 4096, 0);
  void* b = clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, 8192, 0);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<void*> freed;
  void* both[] = {a, b};
  Event with;
  CL_CHECK(clEnqueueSVMFree(queues_[0].get(), 2, both, free_callback, &freed, 0, nullptr, with.out()));
  cl_event w = with.get();
  CL_CHECK(clWaitForEvents(1, &w));
  EXPECT_EQ(freed, (std::vector<void*>{a, b}));
  for (void* p : freed) clSVMFree(ctx_.get(), p);

  // Without a callback, on each device's queue (beside PoCL's CPU device
  // too: the allocation is the memlayer space's whichever queue frees it).
  for (auto& q : queues_) {
    void* c = clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, 4096, 0);
    ASSERT_NE(c, nullptr);
    Event without;
    CL_CHECK(clEnqueueSVMFree(q.get(), 1, &c, nullptr, nullptr, 0, nullptr, without.out()));
    cl_event e = without.get();
    CL_CHECK(clWaitForEvents(1, &e));
    cl_int status = 0;
    CL_CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr));
    EXPECT_EQ(status, CL_COMPLETE);
  }
}

// What a user gets wrong is refused with the error OpenCL names, and the
// allocations that were made stay whole.
TEST_F(Svm, BadRequestsAreRefused) {
  EXPECT_EQ(clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, 0, 0), nullptr) << "size 0";
  EXPECT_EQ(clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, std::size_t{1} << 50, 0), nullptr) << "beyond the space";
  EXPECT_EQ(clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE | CL_MEM_SVM_FINE_GRAIN_BUFFER, 4096, 0), nullptr)
      << "fine-grained: not offered";
  EXPECT_EQ(clSVMAlloc(ctx_.get(), CL_MEM_READ_WRITE, 4096, 3), nullptr) << "alignment not a power of two";
  constexpr std::size_t kN = 1024;
  int* p = alloc<int>(kN);
  ASSERT_NE(p, nullptr);
  const int seven = 7;
  cl_command_queue q = queues_[0].get();
  CL_CHECK(clEnqueueSVMMemFill(q, p, &seven, sizeof seven, kN * sizeof(int), 0, nullptr, nullptr));
  EXPECT_EQ(clEnqueueSVMMemcpy(q, CL_TRUE, p + 10, p, 100 * sizeof(int), 0, nullptr, nullptr), CL_MEM_COPY_OVERLAP);
  EXPECT_EQ(clEnqueueSVMMemFill(q, p, &seven, sizeof seven, 10, 0, nullptr, nullptr), CL_INVALID_VALUE)
      << "size not a multiple of the pattern";
  EXPECT_EQ(clEnqueueSVMMemFill(q, p, &seven, 3, 12, 0, nullptr, nullptr), CL_INVALID_VALUE) << "pattern size 3";
  EXPECT_EQ(clEnqueueSVMMemcpy(q, CL_TRUE, nullptr, p, 4, 0, nullptr, nullptr), CL_INVALID_VALUE) << "null target";
  EXPECT_EQ(clSetKernelArgSVMPointer(add_.get(), 5, p), CL_INVALID_ARG_INDEX);
  EXPECT_EQ(mapped(0, p, kN), std::vector<int>(kN, 7));
}

TEST(SvmOff, DevicesWithoutASpaceOfferNoSvm) {
  if (expect_svm()) GTEST_SKIP() << "the devices offer SVM: Svm checks them";
  std::vector<cl_device_id> devices = all_devices();
  for (cl_device_id d : devices) {
    cl_device_svm_capabilities caps = 1;
    CL_CHECK(clGetDeviceInfo(d, CL_DEVICE_SVM_CAPABILITIES, sizeof caps, &caps, nullptr));
    EXPECT_EQ(caps, 0u);
  }
  cl_int err = CL_SUCCESS;
  Context ctx(clCreateContext(nullptr, static_cast<cl_uint>(devices.size()), devices.data(), nullptr, nullptr, &err));
  CL_CHECK(err);
  EXPECT_EQ(clSVMAlloc(ctx.get(), CL_MEM_READ_WRITE, 4096, 0), nullptr);
}

}  // namespace
