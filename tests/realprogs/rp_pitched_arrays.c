/* rp_pitched_arrays.c - 2D and 3D data in the manner of cuda-samples'
 * simplePitchLinearTexture and simpleCubemapTexture host code: pitched
 * allocations, 2D copies, arrays. Leaks on purpose: one pitched allocation
 * (its pitch times 64 rows, printed) and one 16 KiB array. */
#include <string.h>

#include "realprog.h"

int main(void)
{
    enum { W = 1000, H = 64 };
    static unsigned char host[H][W], back[H][W];
    rp_pattern(&host[0][0], sizeof host, 3);
    unsigned char *d;
    size_t pitch;
    CHECK(cudaMallocPitch((void **)&d, &pitch, W, H));
    CHECK(cudaMemcpy2D(d, pitch, host, W, W, H, cudaMemcpyHostToDevice));
    CHECK(cudaMemset2D(d, pitch, 0x21, 100, 8));
    CHECK(cudaMemcpy2D(back, W, d, pitch, W, H, cudaMemcpyDeviceToHost));
    printf("pitched round trip checksum %016llx\n", (unsigned long long)rp_checksum(back, sizeof back));

    struct cudaPitchedPtr vol;
    struct cudaExtent ext = { .width = 256, .height = 32, .depth = 8 };
    CHECK(cudaMalloc3D(&vol, ext));
    CHECK(cudaMemset3D(vol, 0x3c, ext));
    unsigned char row[256];
    CHECK(cudaMemcpy(row, (char *)vol.ptr + vol.pitch * 32 * 7, sizeof row, cudaMemcpyDeviceToHost));
    printf("volume row checksum %016llx\n", (unsigned long long)rp_checksum(row, sizeof row));
    CHECK(cudaFree(vol.ptr));

    struct cudaChannelFormatDesc f = cudaCreateChannelDesc(32, 0, 0, 0, cudaChannelFormatKindFloat);
    cudaArray_t arr, kept;
    CHECK(cudaMallocArray(&arr, &f, 512, 512, 0));
    struct cudaExtent aext = { .width = 16, .height = 16, .depth = 16 };
    CHECK(cudaMalloc3DArray(&kept, &f, aext, 0));
    CHECK(cudaFreeArray(arr));
    rp_leak("pitched", pitch * H);
    rp_leak("array", 16 * 16 * 16 * 4);
    printf("PASSED\n");
    return 0;
}
