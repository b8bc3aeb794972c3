/* Prints the sizes and offsets of the cuda.h structs that package cuda
 * mirrors, in the format of layout_*.txt. Build it against a toolkit's
 * header, e.g. gcc -I<toolkit>/include layout.c -o layout && ./layout > layout_cudaNN.txt */
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>

#define SIZE(T) printf("size %s %zu\n", #T, sizeof(T))
#define OFF(T, f) printf("offset %s.%s %zu\n", #T, #f, offsetof(T, f))

int main(void) {
	printf("# cuda.h CUDA_VERSION %d\n", CUDA_VERSION);
	SIZE(CUmemLocation);
	OFF(CUmemLocation, type);
	OFF(CUmemLocation, id);
	SIZE(CUmemAllocationProp);
	OFF(CUmemAllocationProp, type);
	OFF(CUmemAllocationProp, requestedHandleTypes);
	OFF(CUmemAllocationProp, location);
	OFF(CUmemAllocationProp, win32HandleMetaData);
	OFF(CUmemAllocationProp, allocFlags);
	OFF(CUmemAllocationProp, allocFlags.compressionType);
	OFF(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable);
	OFF(CUmemAllocationProp, allocFlags.usage);
	OFF(CUmemAllocationProp, allocFlags.reserved);
	SIZE(CUmemAccessDesc);
	OFF(CUmemAccessDesc, location);
	OFF(CUmemAccessDesc, flags);
	SIZE(CUuuid);
	SIZE(CUdeviceptr);
	SIZE(CUmemGenericAllocationHandle);
	SIZE(CUresult);
	SIZE(CUdevice);
	return 0;
}
