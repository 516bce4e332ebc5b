// The Python module of the native kernels (inference/native_kernels.py builds it).
#include <torch/extension.h>

torch::Tensor int4_matmul(torch::Tensor x, torch::Tensor packed, torch::Tensor scale_min);
torch::Tensor int8_matmul(torch::Tensor x, torch::Tensor packed, torch::Tensor wsum,
                          torch::Tensor wscale);
torch::Tensor attend(torch::Tensor q, torch::Tensor keys, torch::Tensor values,
                     torch::Tensor lengths, torch::Tensor index, double scale);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_matmul", &int4_matmul, "int4 weights x int8-quantized activations (AVX-512 VNNI)");
  m.def("int8_matmul", &int8_matmul, "int8 weights x int8-quantized activations (AVX-512 VNNI)");
  m.def("attend", &attend, "attention of a few query rows over a KV cache (AVX-512)");
}
