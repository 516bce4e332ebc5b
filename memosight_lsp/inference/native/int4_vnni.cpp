// int4 weights x int8 activations on AVX-512 VNNI: the product a decoding pass makes with
// every quantized linear layer (inference/native_kernels.py builds this file once per machine).
//
// Weights: groups of GROUP input channels, value q in 0..15 with w = q * scale + min per output
// channel and group, packed in tiles of TILE output channels. Within a tile each 64-byte vector
// holds 8 input channels for the 16 outputs: byte 4 * o + j carries input 8p + j in its low
// nibble and input 8p + 4 + j in its high one, the layout VPDPBUSD multiplies lane by lane.
// Activations: each row is quantized to int8 per the same groups (scale = amax / 127) on the way
// in. Per group:  sum_k w_k x_k ~= xs * (scale * sum_k q_k xq_k + min * sum_k xq_k).
//
// Every output element is computed by the same instructions in the same order whatever the
// number of rows in the call or the thread count, so a pass over k rows gives each row exactly
// the bits a one-row pass gives it: what lossless speculative decoding needs.
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>

#include "simd.h"

namespace {
constexpr int64_t TILE = 16;
constexpr int64_t GROUP = native::ACT_GROUP;  // inputs per weight scale, minimum, activation scale
constexpr int64_t VECTORS = GROUP / 8;        // 64-byte weight vectors per tile and group
constexpr int ROW_BLOCK = native::ROW_BLOCK;  // rows multiplied per load of a weight vector

// NR rows (starting at `row`) times one tile: 16 outputs of each row, in float32.
template <int NR>
void tile_rows(const uint8_t* w, const float* scale_min, const native::Activations& a, int64_t row,
               int64_t k, float* out) {
  const int64_t groups = k / GROUP;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 result[NR];
  for (int r = 0; r < NR; ++r) result[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m512i acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_si512();
    const uint8_t* wg = w + g * VECTORS * 64;
    const int8_t* xg = a.q + row * k + g * GROUP;
    for (int64_t p = 0; p < VECTORS; ++p) {
      const __m512i v = _mm512_loadu_si512(wg + p * 64);
      const __m512i lo = _mm512_and_si512(v, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      for (int r = 0; r < NR; ++r) {
        const int8_t* x = xg + r * k + p * 8;
        int32_t x_lo, x_hi;
        __builtin_memcpy(&x_lo, x, 4);
        __builtin_memcpy(&x_hi, x + 4, 4);
        acc[r] = _mm512_dpbusd_epi32(acc[r], lo, _mm512_set1_epi32(x_lo));
        acc[r] = _mm512_dpbusd_epi32(acc[r], hi, _mm512_set1_epi32(x_hi));
      }
    }
    const __m512 scale = _mm512_loadu_ps(scale_min + g * 2 * TILE);
    const __m512 min = _mm512_loadu_ps(scale_min + g * 2 * TILE + TILE);
    for (int r = 0; r < NR; ++r) {
      const int64_t at = (row + r) * groups + g;
      __m512 t = _mm512_mul_ps(scale, _mm512_cvtepi32_ps(acc[r]));
      t = _mm512_fmadd_ps(min, _mm512_set1_ps(a.sums[at]), t);
      result[r] = _mm512_fmadd_ps(_mm512_set1_ps(a.scales[at]), t, result[r]);
    }
  }
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(out + r * TILE, result[r]);
}

using TileRows = void (*)(const uint8_t*, const float*, const native::Activations&, int64_t,
                          int64_t, float*);
constexpr TileRows TILE_ROWS[ROW_BLOCK + 1] = {nullptr,       tile_rows<1>, tile_rows<2>,
                                               tile_rows<3>,  tile_rows<4>, tile_rows<5>,
                                               tile_rows<6>,  tile_rows<7>, tile_rows<8>};

template <typename T>
void int4_matmul_impl(const torch::Tensor& x, const torch::Tensor& packed,
                      const torch::Tensor& scale_min, torch::Tensor& out) {
  const int64_t rows = x.size(0), k = x.size(1), groups = k / GROUP, tiles = packed.size(0);
  native::QuantizedRows q(x.data_ptr<T>(), rows, k, GROUP);
  const native::Activations a = q.view();
  const uint8_t* wp = packed.data_ptr<uint8_t>();
  const float* sp = scale_min.data_ptr<float>();
  native::for_each_tile_block(rows, tiles, 4, out.data_ptr<T>(), [&](int64_t t, int64_t r, int nr, float* tile_out) {
    TILE_ROWS[nr](wp + t * (k / 8) * 64, sp + t * groups * 2 * TILE, a, r, k, tile_out);
  });
}
}  // namespace

// x [R, K] float32 or bfloat16; packed uint8 [N / 16, K / 8, 64]; scale_min float32
// [N / 16, K / 32, 2, 16] -> [R, N] in x's dtype.
torch::Tensor int4_matmul(torch::Tensor x, torch::Tensor packed, torch::Tensor scale_min) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % 128 == 0, "x must be [rows, k] with k % 128 == 0");
  TORCH_CHECK(packed.dtype() == torch::kUInt8 && packed.dim() == 3 && packed.size(2) == 64 &&
                  packed.size(1) * 8 == x.size(1),
              "packed weight does not match x");
  TORCH_CHECK(scale_min.dtype() == torch::kFloat32 && scale_min.size(0) == packed.size(0) &&
                  scale_min.size(1) * GROUP == x.size(1),
              "scales do not match the weight");
  x = x.contiguous();
  packed = packed.contiguous();
  scale_min = scale_min.contiguous();
  auto out = torch::empty({x.size(0), packed.size(0) * TILE}, x.options());
  if (x.scalar_type() == torch::kBFloat16) {
    int4_matmul_impl<at::BFloat16>(x, packed, scale_min, out);
  } else {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32 or bfloat16");
    int4_matmul_impl<float>(x, packed, scale_min, out);
  }
  return out;
}
