// What the native kernels share: float32 / bfloat16 vector loads and stores, and activations
// quantized to int8 per group (the form VPDPBUSD multiplies).
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>

namespace native {

inline __m512 load_floats(const float* p) { return _mm512_loadu_ps(p); }

inline __m512 load_floats(const at::BFloat16* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

inline void store_floats(float* p, __m512 v) { _mm512_storeu_ps(p, v); }

inline void store_floats(at::BFloat16* p, __m512 v) {
  // Round to nearest even, as torch converts float32 to bfloat16 (NaN aside).
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16)));
}

// Rows of activations quantized per group: value ~= scale * q.
struct Activations {
  const int8_t* q;         // [R, K]
  const uint8_t* shifted;  // [R, K]: q + 128, for the unsigned side of VPDPBUSD
  const float* scales;     // [R, K / group]: amax / 127
  const float* sums;       // [R, K / group]: sum of q
};

class QuantizedRows {
 public:
  template <typename T>
  QuantizedRows(const T* x, int64_t rows, int64_t k, int64_t group)
      : q_(torch::empty({rows, k}, torch::kInt8)),
        shifted_(torch::empty({rows, k}, torch::kUInt8)),
        scales_(torch::empty({rows, k / group}, torch::kFloat32)),
        sums_(torch::empty({rows, k / group}, torch::kFloat32)) {
    int8_t* q = q_.data_ptr<int8_t>();
    uint8_t* shifted = shifted_.data_ptr<uint8_t>();
    float* scales = scales_.data_ptr<float>();
    float* sums = sums_.data_ptr<float>();
    const int64_t groups = k / group;
    at::parallel_for(0, rows, 8, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t at = r * k + g * group;
          quantize_group(x + at, group, q + at, shifted + at, scales + r * groups + g,
                         sums + r * groups + g);
        }
      }
    });
  }

  Activations view() const {
    return {q_.data_ptr<int8_t>(), shifted_.data_ptr<uint8_t>(), scales_.data_ptr<float>(),
            sums_.data_ptr<float>()};
  }

 private:
  template <typename T>
  static void quantize_group(const T* x, int64_t size, int8_t* q, uint8_t* shifted, float* scale,
                             float* sum) {
    __m512 amax = _mm512_setzero_ps();
    for (int64_t i = 0; i < size; i += 16) {
      amax = _mm512_max_ps(amax, _mm512_abs_ps(load_floats(x + i)));
    }
    const float top = _mm512_reduce_max_ps(amax);
    const __m512 inverse = _mm512_set1_ps(top > 0.0f ? 127.0f / top : 0.0f);
    const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
    __m512i total = _mm512_setzero_si512();
    for (int64_t i = 0; i < size; i += 16) {
      const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(load_floats(x + i), inverse));
      total = _mm512_add_epi32(total, v);
      const __m128i bytes = _mm512_cvtsepi32_epi8(v);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), bytes);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(shifted + i), _mm_xor_si128(bytes, flip));
    }
    *scale = top / 127.0f;
    *sum = static_cast<float>(_mm512_reduce_add_epi32(total));
  }

  torch::Tensor q_, shifted_, scales_, sums_;
};

// The loop both weight kernels share: rows in chunks of ROW_CHUNK (their activations stay in
// cache), tiles of 16 outputs spread over the threads, each tile times blocks of up to
// ROW_BLOCK rows. multiply(tile, row, rows, tile_out) fills tile_out [rows, 16] in float32;
// the results go to out [R, tiles * 16] as T.
constexpr int ROW_BLOCK = 8;
// Inputs per activation scale, per int8 weight sum and per int4 weight scale and minimum: 32, as
// llama.cpp's q8_0 / q4_1 blocks (docs/speculative.md measures what 128 cost in quality).
constexpr int64_t ACT_GROUP = 32;
constexpr int64_t ROW_CHUNK = 64;

template <typename T, typename Multiply>
void for_each_tile_block(int64_t rows, int64_t tiles, int64_t grain, T* out,
                         const Multiply& multiply) {
  const int64_t n = tiles * 16;
  for (int64_t chunk = 0; chunk < rows; chunk += ROW_CHUNK) {
    const int64_t chunk_end = std::min(rows, chunk + ROW_CHUNK);
    at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
      float tile_out[ROW_BLOCK * 16];
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t r = chunk; r < chunk_end; r += ROW_BLOCK) {
          const int nr = static_cast<int>(std::min<int64_t>(ROW_BLOCK, chunk_end - r));
          multiply(t, r, nr, tile_out);
          for (int i = 0; i < nr; ++i) {
            store_floats(out + (r + i) * n + t * 16, _mm512_loadu_ps(tile_out + i * 16));
          }
        }
      }
    });
  }
}

}  // namespace native
