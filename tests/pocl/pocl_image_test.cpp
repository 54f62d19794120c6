// Images on memlayer devices with separate memories, through the ICD
// loader: maps of random regions read and written on alternating devices,
// image reads and writes, image <-> buffer and image <-> image copies, for
// every image type and the host-pointer flags an application uses, each
// image's final content read back on every device and compared with a
// host model of every byte. Images migrate between devices as whole
// buffers (doc/pocl-driver.md); what is checked is that the content is
// right wherever it is read.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cl_check.hpp"

using namespace memlayer::cltest;

namespace {

struct ImageCase {
  const char* name;
  cl_mem_object_type type;
  std::array<std::size_t, 3> size;  // width, height (or array size), depth (or array size)
};

constexpr ImageCase kCases[] = {
    {"1D", CL_MEM_OBJECT_IMAGE1D, {256, 1, 1}},
    {"1D array", CL_MEM_OBJECT_IMAGE1D_ARRAY, {32, 9, 1}},
    {"2D", CL_MEM_OBJECT_IMAGE2D, {40, 24, 1}},
    {"2D array", CL_MEM_OBJECT_IMAGE2D_ARRAY, {16, 12, 5}},
    {"3D", CL_MEM_OBJECT_IMAGE3D, {16, 12, 6}},
};

struct FlagCase {
  const char* name;
  cl_mem_flags flags;
};

constexpr FlagCase kFlags[] = {
    {"COPY_HOST_PTR", CL_MEM_COPY_HOST_PTR},
    {"USE_HOST_PTR", CL_MEM_USE_HOST_PTR},
    {"ALLOC_HOST_PTR|COPY_HOST_PTR", CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR},
    {"none (written)", 0},
};

constexpr cl_image_format kRgba8{CL_RGBA, CL_UNSIGNED_INT8};
constexpr std::size_t kPixel = 4;

// The image's bytes as a host model: pixels in x, then rows (or the 1D
// array's items), then slices (or the 2D array's items), tightly packed.
class Model {
 public:
  explicit Model(const ImageCase& c) : c_(c), bytes_(c.size[0] * c.size[1] * c.size[2] * kPixel) {}
  [[nodiscard]] std::size_t index(std::size_t x, std::size_t y, std::size_t z) const {
    return ((z * c_.size[1] + y) * c_.size[0] + x) * kPixel;
  }
  std::vector<cl_uchar>& bytes() { return bytes_; }

 private:
  const ImageCase& c_;
  std::vector<cl_uchar> bytes_;
};

// Where pixel (x, y, z) of a mapped region is: a 1D array's items are
// slice_pitch apart (the spec's image_slice_pitch for 1D arrays).
std::size_t mapped_offset(const ImageCase& c, std::size_t x, std::size_t y, std::size_t z, std::size_t row_pitch,
                          std::size_t slice_pitch) {
  const std::size_t y_pitch = c.type == CL_MEM_OBJECT_IMAGE1D_ARRAY ? slice_pitch : row_pitch;
  return x * kPixel + y * y_pitch + z * slice_pitch;
}

Mem make_image(cl_context ctx, const ImageCase& c, cl_mem_flags flags, void* host, cl_int* err) {
  cl_image_desc desc{};
  desc.image_type = c.type;
  desc.image_width = c.size[0];
  if (c.type == CL_MEM_OBJECT_IMAGE1D_ARRAY) {
    desc.image_array_size = c.size[1];
  } else if (c.type == CL_MEM_OBJECT_IMAGE2D_ARRAY) {
    desc.image_height = c.size[1];
    desc.image_array_size = c.size[2];
  } else {
    desc.image_height = c.size[1];
    desc.image_depth = c.size[2];
  }
  if (c.type == CL_MEM_OBJECT_IMAGE1D || c.type == CL_MEM_OBJECT_IMAGE1D_ARRAY) desc.image_height = 0;
  if (c.type != CL_MEM_OBJECT_IMAGE3D) desc.image_depth = 0;
  return Mem(clCreateImage(ctx, CL_MEM_READ_WRITE | flags, &kRgba8, &desc, host, err));
}

// A 1D image of `width` RGBA8 pixels whose bytes are `buffer`'s
// (CL_MEM_OBJECT_IMAGE1D_BUFFER).
Mem make_image_over(cl_context ctx, cl_mem buffer, std::size_t width, cl_int* err) {
  cl_image_desc desc{};
  desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER;
  desc.image_width = width;
  desc.buffer = buffer;
  return Mem(clCreateImage(ctx, CL_MEM_READ_WRITE, &kRgba8, &desc, nullptr, err));
}

class Images : public ::testing::Test {
 protected:
  void SetUp() override {
    set_ = open_device_set("kernel void unused(global int* p) { p[0] = 0; }");
    ASSERT_EQ(set_.devices.size(), 2u) << "run with POCL_DEVICES=\"memlayer memlayer\"";
  }
  cl_command_queue queue(std::size_t i) const { return set_.queues[i % 2].get(); }

  // A random region of the image: origin and size per dimension in use.
  void random_region(const ImageCase& c, std::array<std::size_t, 3>& origin, std::array<std::size_t, 3>& region) {
    for (int d = 0; d < 3; ++d) {
      origin[d] = std::uniform_int_distribution<std::size_t>(0, c.size[d] - 1)(rng_);
      region[d] = std::uniform_int_distribution<std::size_t>(1, c.size[d] - origin[d])(rng_);
    }
  }

  // Reads the whole image on queue `q` and compares it with the model.
  void expect_content(cl_command_queue q, cl_mem image, const ImageCase& c, Model& model, const std::string& what) {
    std::vector<cl_uchar> out(model.bytes().size(), 0);
    const std::size_t origin[3] = {0, 0, 0};
    const std::size_t region[3] = {c.size[0], c.size[1], c.size[2]};
    ASSERT_EQ(clEnqueueReadImage(q, image, CL_TRUE, origin, region, 0, 0, out.data(), 0, nullptr, nullptr),
              CL_SUCCESS)
        << what;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i) wrong += out[i] != model.bytes()[i];
    EXPECT_EQ(wrong, 0u) << what << ": bytes that differ from the model";
  }

  DeviceSet set_;
  std::mt19937_64 rng_{20261125};
};

// Random regions mapped for reading and writing, on one device then the
// other (each map migrates the image), then the whole image read on both.
TEST_F(Images, MapsOfRandomRegionsOnAlternatingDevicesKeepEveryByte) {
  for (const ImageCase& c : kCases) {
    for (const FlagCase& f : kFlags) {
      const std::string what = std::string(c.name) + ", " + f.name;
      Model model(c);
      for (cl_uchar& b : model.bytes()) b = static_cast<cl_uchar>(rng_());
      std::vector<cl_uchar> host = model.bytes();  // the user's memory (USE_HOST_PTR keeps it)
      cl_int err = CL_SUCCESS;
      Mem image = make_image(set_.ctx.get(), c, f.flags, f.flags != 0 ? host.data() : nullptr, &err);
      ASSERT_EQ(err, CL_SUCCESS) << what;
      if (f.flags == 0) {
        const std::size_t origin[3] = {0, 0, 0};
        const std::size_t region[3] = {c.size[0], c.size[1], c.size[2]};
        ASSERT_EQ(clEnqueueWriteImage(queue(1), image.get(), CL_TRUE, origin, region, 0, 0, model.bytes().data(), 0,
                                      nullptr, nullptr),
                  CL_SUCCESS)
            << what;
      }
      for (int round = 0; round < 6; ++round) {
        std::array<std::size_t, 3> origin{}, region{};
        random_region(c, origin, region);
        std::size_t row_pitch = 0, slice_pitch = 0;
        auto* p = static_cast<cl_uchar*>(clEnqueueMapImage(queue(round), image.get(), CL_TRUE,
                                                           CL_MAP_READ | CL_MAP_WRITE, origin.data(), region.data(),
                                                           &row_pitch, &slice_pitch, 0, nullptr, nullptr, &err));
        ASSERT_EQ(err, CL_SUCCESS) << what << ", round " << round;
        ASSERT_NE(p, nullptr);
        std::size_t wrong = 0;
        const cl_uchar spin = static_cast<cl_uchar>(rng_());
        for (std::size_t z = 0; z < region[2]; ++z)
          for (std::size_t y = 0; y < region[1]; ++y)
            for (std::size_t x = 0; x < region[0]; ++x)
              for (std::size_t b = 0; b < kPixel; ++b) {
                cl_uchar& mapped = p[mapped_offset(c, x, y, z, row_pitch, slice_pitch) + b];
                cl_uchar& expected = model.bytes()[model.index(origin[0] + x, origin[1] + y, origin[2] + z) + b];
                wrong += mapped != expected;
                expected = mapped = static_cast<cl_uchar>(spin - mapped + static_cast<cl_uchar>(x + y + z));
              }
        EXPECT_EQ(wrong, 0u) << what << ", round " << round << ": mapped bytes that differ from the model";
        ASSERT_EQ(clEnqueueUnmapMemObject(queue(round), image.get(), p, 0, nullptr, nullptr), CL_SUCCESS) << what;
      }
      expect_content(queue(0), image.get(), c, model, what + ", read on device 0");
      expect_content(queue(1), image.get(), c, model, what + ", read on device 1");
      if (f.flags & CL_MEM_USE_HOST_PTR) {
        // The user's memory holds the content once the application maps it.
        const std::size_t origin[3] = {0, 0, 0};
        const std::size_t region[3] = {c.size[0], c.size[1], c.size[2]};
        std::size_t row_pitch = 0, slice_pitch = 0;
        void* p = clEnqueueMapImage(queue(0), image.get(), CL_TRUE, CL_MAP_READ, origin, region, &row_pitch,
                                    &slice_pitch, 0, nullptr, nullptr, &err);
        ASSERT_EQ(err, CL_SUCCESS) << what;
        EXPECT_EQ(p, host.data()) << what << ": a USE_HOST_PTR map is the user's memory";
        EXPECT_EQ(host, model.bytes()) << what;
        ASSERT_EQ(clEnqueueUnmapMemObject(queue(0), image.get(), p, 0, nullptr, nullptr), CL_SUCCESS);
      }
      ASSERT_EQ(clFinish(queue(0)), CL_SUCCESS);
      ASSERT_EQ(clFinish(queue(1)), CL_SUCCESS);
    }
  }
}

// Written on one device, copied to a buffer and to another image on the
// other, the buffer copied back into a region of the first image: each
// result read where it was not made.
TEST_F(Images, CopiesBetweenImagesAndBuffersAcrossDevices) {
  for (const ImageCase& c : kCases) {
    const std::string what = c.name;
    Model model(c);
    for (cl_uchar& b : model.bytes()) b = static_cast<cl_uchar>(rng_());
    cl_int err = CL_SUCCESS;
    Mem a = make_image(set_.ctx.get(), c, 0, nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS) << what;
    Mem b = make_image(set_.ctx.get(), c, 0, nullptr, &err);
    ASSERT_EQ(err, CL_SUCCESS) << what;
    const std::size_t bytes = model.bytes().size();
    Mem buffer(clCreateBuffer(set_.ctx.get(), CL_MEM_READ_WRITE, bytes, nullptr, &err));
    ASSERT_EQ(err, CL_SUCCESS);
    const std::size_t zero[3] = {0, 0, 0};
    const std::size_t whole[3] = {c.size[0], c.size[1], c.size[2]};
    ASSERT_EQ(clEnqueueWriteImage(queue(0), a.get(), CL_TRUE, zero, whole, 0, 0, model.bytes().data(), 0, nullptr,
                                  nullptr),
              CL_SUCCESS)
        << what;
    // a -> buffer and a -> b on device 1.
    ASSERT_EQ(clEnqueueCopyImageToBuffer(queue(1), a.get(), buffer.get(), zero, whole, 0, 0, nullptr, nullptr),
              CL_SUCCESS)
        << what;
    ASSERT_EQ(clEnqueueCopyImage(queue(1), a.get(), b.get(), zero, zero, whole, 0, nullptr, nullptr), CL_SUCCESS)
        << what;
    ASSERT_EQ(clFinish(queue(1)), CL_SUCCESS);
    std::vector<cl_uchar> out(bytes, 0);
    ASSERT_EQ(clEnqueueReadBuffer(queue(0), buffer.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
              CL_SUCCESS);
    EXPECT_EQ(out, model.bytes()) << what << ": image to buffer";
    expect_content(queue(0), b.get(), c, model, what + ": image to image");
    // The buffer changed on device 0, then copied into a region of a on device 1.
    for (cl_uchar& v : out) v = static_cast<cl_uchar>(v ^ 0x5a);
    ASSERT_EQ(clEnqueueWriteBuffer(queue(0), buffer.get(), CL_TRUE, 0, bytes, out.data(), 0, nullptr, nullptr),
              CL_SUCCESS);
    std::array<std::size_t, 3> origin{}, region{};
    random_region(c, origin, region);
    ASSERT_EQ(clEnqueueCopyBufferToImage(queue(1), buffer.get(), a.get(), 0, origin.data(), region.data(), 0, nullptr,
                                         nullptr),
              CL_SUCCESS)
        << what;
    // The buffer's first region-sized bytes, packed, land in the region.
    std::size_t k = 0;
    for (std::size_t z = 0; z < region[2]; ++z)
      for (std::size_t y = 0; y < region[1]; ++y)
        for (std::size_t x = 0; x < region[0]; ++x, k += kPixel)
          std::memcpy(&model.bytes()[model.index(origin[0] + x, origin[1] + y, origin[2] + z)], &out[k], kPixel);
    expect_content(queue(0), a.get(), c, model, what + ": buffer to image region");
  }
}

}  // namespace

// A 1D image over a buffer (CL_MEM_OBJECT_IMAGE1D_BUFFER) holds its bytes
// in the buffer: PoCL turns the image's reads and writes into the
// buffer's, and the engine tracks the buffer for both. Written through one
// on a device, read through the other on the other device, both ways.
TEST_F(Images, AnImageOverABufferSharesItsBytesAcrossDevices) {
  constexpr std::size_t kWidth = 256;
  std::vector<cl_uchar> bytes(kWidth * kPixel);
  for (cl_uchar& b : bytes) b = static_cast<cl_uchar>(rng_());
  cl_int err = CL_SUCCESS;
  Mem buffer(clCreateBuffer(set_.ctx.get(), CL_MEM_READ_WRITE, bytes.size(), nullptr, &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem image = make_image_over(set_.ctx.get(), buffer.get(), kWidth, &err);
  ASSERT_EQ(err, CL_SUCCESS);

  ASSERT_EQ(clEnqueueWriteBuffer(queue(0), buffer.get(), CL_TRUE, 0, bytes.size(), bytes.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  std::vector<cl_uchar> out(bytes.size(), 0);
  const std::size_t origin[3] = {0, 0, 0};
  const std::size_t region[3] = {kWidth, 1, 1};
  ASSERT_EQ(clEnqueueReadImage(queue(1), image.get(), CL_TRUE, origin, region, 0, 0, out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(out, bytes) << "the image read on device 1 what the buffer was given on device 0";

  // Pixels [64, 128) written through the image on device 1.
  const std::size_t part_origin[3] = {64, 0, 0};
  const std::size_t part_region[3] = {64, 1, 1};
  std::vector<cl_uchar> part(64 * kPixel);
  for (cl_uchar& b : part) b = static_cast<cl_uchar>(rng_());
  ASSERT_EQ(clEnqueueWriteImage(queue(1), image.get(), CL_TRUE, part_origin, part_region, 0, 0, part.data(), 0,
                                nullptr, nullptr),
            CL_SUCCESS);
  std::copy(part.begin(), part.end(), bytes.begin() + 64 * kPixel);
  std::fill(out.begin(), out.end(), 0);
  ASSERT_EQ(clEnqueueReadBuffer(queue(0), buffer.get(), CL_TRUE, 0, out.size(), out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  EXPECT_EQ(out, bytes) << "the buffer read on device 0 what the image was written on device 1";
}

// What a kernel writes through a write_only image argument is the image's
// new content, read on the other device: a 2D image, and a 1D image over
// a buffer read back through the buffer. PoCL took every image argument
// for read-only (pocl-*-image-write-access-is-a-write.patch): neither
// engine migrated the kernel's writes, and the other device read the
// content from before.
TEST_F(Images, WhatAKernelWritesThroughAnImageReachesTheOtherDevice) {
  const Program program = build_program(set_.ctx.get(), set_.devices, R"CLC(
kernel void paint2d(write_only image2d_t img, uint v) {
  const int x = get_global_id(0), y = get_global_id(1);
  write_imageui(img, (int2)(x, y), (uint4)(x & 255, y & 255, v, 9));
}
kernel void paint1d(write_only image1d_buffer_t img, uint v) {
  const int x = get_global_id(0);
  write_imageui(img, x, (uint4)(x & 255, 3, v, 9));
}
)CLC");
  cl_int err = CL_SUCCESS;
  const cl_uint v = 200;
  auto run = [&](const char* name, cl_mem img, std::size_t width, std::size_t height) {
    Kernel k(clCreateKernel(program.get(), name, &err));
    ASSERT_EQ(err, CL_SUCCESS) << name;
    ASSERT_EQ(clSetKernelArg(k.get(), 0, sizeof img, &img), CL_SUCCESS);
    ASSERT_EQ(clSetKernelArg(k.get(), 1, sizeof v, &v), CL_SUCCESS);
    const std::size_t global[2] = {width, height};
    ASSERT_EQ(clEnqueueNDRangeKernel(queue(1), k.get(), height > 1 ? 2 : 1, nullptr, global, nullptr, 0, nullptr,
                                     nullptr),
              CL_SUCCESS)
        << name;
    ASSERT_EQ(clFinish(queue(1)), CL_SUCCESS);
  };

  // A 2D image given on device 0, painted whole on device 1, read on device 0.
  const ImageCase& c = kCases[2];
  ASSERT_EQ(c.type, static_cast<cl_mem_object_type>(CL_MEM_OBJECT_IMAGE2D));
  Model model(c);
  for (cl_uchar& b : model.bytes()) b = static_cast<cl_uchar>(rng_());
  Mem image = make_image(set_.ctx.get(), c, CL_MEM_COPY_HOST_PTR, model.bytes().data(), &err);
  ASSERT_EQ(err, CL_SUCCESS);
  expect_content(queue(0), image.get(), c, model, "2D, before the kernel");
  run("paint2d", image.get(), c.size[0], c.size[1]);
  for (std::size_t y = 0; y < c.size[1]; ++y)
    for (std::size_t x = 0; x < c.size[0]; ++x) {
      cl_uchar* p = &model.bytes()[model.index(x, y, 0)];
      p[0] = static_cast<cl_uchar>(x & 255), p[1] = static_cast<cl_uchar>(y & 255), p[2] = v, p[3] = 9;
    }
  expect_content(queue(0), image.get(), c, model, "2D, painted on device 1, read on device 0");

  // A 1D image over a buffer: the buffer read on device 0.
  constexpr std::size_t kWidth = 256;
  std::vector<cl_uchar> bytes(kWidth * kPixel);
  for (cl_uchar& b : bytes) b = static_cast<cl_uchar>(rng_());
  Mem buffer(clCreateBuffer(set_.ctx.get(), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes.size(), bytes.data(), &err));
  ASSERT_EQ(err, CL_SUCCESS);
  Mem over = make_image_over(set_.ctx.get(), buffer.get(), kWidth, &err);
  ASSERT_EQ(err, CL_SUCCESS);
  std::vector<cl_uchar> out(bytes.size(), 0);
  ASSERT_EQ(clEnqueueReadBuffer(queue(0), buffer.get(), CL_TRUE, 0, out.size(), out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  ASSERT_EQ(out, bytes) << "1D over a buffer, before the kernel";
  run("paint1d", over.get(), kWidth, 1);
  for (std::size_t x = 0; x < kWidth; ++x) {
    cl_uchar* p = &bytes[x * kPixel];
    p[0] = static_cast<cl_uchar>(x & 255), p[1] = 3, p[2] = v, p[3] = 9;
  }
  ASSERT_EQ(clEnqueueReadBuffer(queue(0), buffer.get(), CL_TRUE, 0, out.size(), out.data(), 0, nullptr, nullptr),
            CL_SUCCESS);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < out.size(); ++i) wrong += out[i] != bytes[i];
  EXPECT_EQ(wrong, 0u) << "1D over a buffer, painted on device 1, the buffer read on device 0: bytes that differ";
}
