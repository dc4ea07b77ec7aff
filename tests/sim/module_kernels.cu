// tests/sim/module_kernels.cu - built with `nvcc -cubin` into the image
// test_sim_module.c loads with cuModuleLoadData, as Triton's launcher loads
// the cubins it compiles: one kernel (a global function of the ELF) and a
// device function that is no kernel.
__device__ float twice(float x) { return 2.0f * x; }

extern "C" __global__ void scale(float *out, const float *in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = twice(in[i]);
}
