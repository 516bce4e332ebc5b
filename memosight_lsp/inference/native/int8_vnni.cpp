// int8 weights x int8 activations on AVX-512 VNNI: the LM head (and int8 trunks), read once for
// up to 8 rows (inference/native_kernels.py builds this file).
//
// Weights: int8 with one scale per output channel, in tiles of TILE output channels; within a
// tile each 64-byte vector holds 4 input channels for the 16 outputs (byte 4 * o + j: input
// 4p + j), the layout VPDPBUSD multiplies lane by lane. VPDPBUSD takes unsigned bytes on one
// side, so activations are quantized to int8 per group of GROUP inputs and shifted by 128:
//   sum_k w_k x_k ~= wscale * sum_g xs_g * (sum_{k in g} w_k (xq_k + 128) - 128 sum_{k in g} w_k)
// with each group's weight sums kept beside the weights.
//
// As in int4_vnni.cpp, each output element is computed alike whatever the other rows of the call
// or the thread count.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>

#include "simd.h"

namespace {
constexpr int64_t TILE = 16;
constexpr int64_t GROUP = native::ACT_GROUP;  // inputs per activation scale and weight sum
constexpr int64_t VECTORS = GROUP / 4;        // 64-byte weight vectors per tile and group
constexpr int ROW_BLOCK = native::ROW_BLOCK;  // rows multiplied per load of a weight vector

template <int NR>
void tile_rows(const int8_t* w, const int32_t* wsum, const float* wscale,
               const native::Activations& a, int64_t row, int64_t k, float* out) {
  const int64_t groups = k / GROUP;
  __m512 result[NR];
  for (int r = 0; r < NR; ++r) result[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_si512();
    const int8_t* wg = w + g * VECTORS * 64;
    const uint8_t* xg = a.shifted + row * k + g * GROUP;
    for (int64_t p = 0; p < VECTORS; ++p) {
      const __m512i v = _mm512_loadu_si512(wg + p * 64);
      for (int r = 0; r < NR; ++r) {
        int32_t x;
        __builtin_memcpy(&x, xg + r * k + p * 4, 4);
        acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(x), v);
      }
    }
    const __m512i offset = _mm512_slli_epi32(_mm512_loadu_si512(wsum + g * TILE), 7);  // 128 sum
    for (int r = 0; r < NR; ++r) {
      const __m512 dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], offset));
      result[r] = _mm512_fmadd_ps(_mm512_set1_ps(a.scales[(row + r) * groups + g]), dot, result[r]);
    }
  }
  const __m512 scale = _mm512_loadu_ps(wscale);
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(out + r * TILE, _mm512_mul_ps(result[r], scale));
}

using TileRows = void (*)(const int8_t*, const int32_t*, const float*, const native::Activations&,
                          int64_t, int64_t, float*);
constexpr TileRows TILE_ROWS[ROW_BLOCK + 1] = {nullptr,       tile_rows<1>, tile_rows<2>,
                                               tile_rows<3>,  tile_rows<4>, tile_rows<5>,
                                               tile_rows<6>,  tile_rows<7>, tile_rows<8>};

template <typename T>
void int8_matmul_impl(const torch::Tensor& x, const torch::Tensor& packed,
                      const torch::Tensor& wsum, const torch::Tensor& wscale, torch::Tensor& out) {
  const int64_t rows = x.size(0), k = x.size(1), groups = k / GROUP, tiles = packed.size(0);
  native::QuantizedRows q(x.data_ptr<T>(), rows, k, GROUP);
  const native::Activations a = q.view();
  const int8_t* wp = packed.data_ptr<int8_t>();
  const int32_t* sp = wsum.data_ptr<int32_t>();
  const float* cp = wscale.data_ptr<float>();
  native::for_each_tile_block(rows, tiles, 16, out.data_ptr<T>(), [&](int64_t t, int64_t r, int nr, float* tile_out) {
    TILE_ROWS[nr](wp + t * k * TILE, sp + t * groups * TILE, cp + t * TILE, a, r, k, tile_out);
  });
}
}  // namespace

// x [R, K] float32 or bfloat16; packed int8 [N / 16, K / 4, 64]; wsum int32 [N / 16, K / 32,
// 16]; wscale float32 [N] -> [R, N] in x's dtype.
torch::Tensor int8_matmul(torch::Tensor x, torch::Tensor packed, torch::Tensor wsum,
                          torch::Tensor wscale) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % 128 == 0, "x must be [rows, k] with k % 128 == 0");
  TORCH_CHECK(packed.scalar_type() == torch::kInt8 && packed.dim() == 3 && packed.size(2) == 64 &&
                  packed.size(1) * 4 == x.size(1),
              "packed weight does not match x");
  TORCH_CHECK(wsum.scalar_type() == torch::kInt32 && wsum.numel() == packed.size(0) * x.size(1) / GROUP * TILE,
              "weight sums do not match the weight");
  TORCH_CHECK(wscale.scalar_type() == torch::kFloat32 && wscale.numel() == packed.size(0) * TILE,
              "scales do not match the weight");
  x = x.contiguous();
  packed = packed.contiguous();
  wsum = wsum.contiguous();
  wscale = wscale.contiguous();
  auto out = torch::empty({x.size(0), packed.size(0) * TILE}, x.options());
  if (x.scalar_type() == torch::kBFloat16) {
    int8_matmul_impl<at::BFloat16>(x, packed, wsum, wscale, out);
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32 or bfloat16");
    int8_matmul_impl<float>(x, packed, wsum, wscale, out);
  }
  return out;
}
