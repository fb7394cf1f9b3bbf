#!/usr/bin/env bash
# Prints the CUPTI facts the collector (tracer/gputime/collector) relies on,
# from the real headers and library on a GPU machine: record layouts, enum
# values, which entry points the installed libcupti has, where it lives.
set -u
CUPTI_INC=/usr/local/cuda-13.0/targets/x86_64-linux/include
CUDA_INC=/usr/local/cuda-13.0/targets/x86_64-linux/include
site=$(python3 -c 'import site; print(site.getsitepackages()[0])')
echo "== libcupti candidates"
ls -l /usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti* 2>&1 | head
find "$site/nvidia" -name 'libcupti*' 2>/dev/null | head
cat > /tmp/abi.c <<'C'
#include <stdio.h>
#include <stddef.h>
#include <cupti.h>
#define O(T,f) printf("%-32s %-24s off=%3zu size=%zu\n", #T, #f, offsetof(T,f), sizeof(((T*)0)->f))
int main(void){
  printf("CUPTI_API_VERSION %d\n", CUPTI_API_VERSION);
  printf("KIND MEMCPY=%d MEMSET=%d KERNEL=%d DRIVER=%d RUNTIME=%d CONCURRENT_KERNEL=%d SYNCHRONIZATION=%d EXTERNAL_CORRELATION=%d\n",
    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  printf("ERR MAX_LIMIT_REACHED=%d MULTIPLE_SUBSCRIBERS=%d NOT_INITIALIZED=%d\n", CUPTI_ERROR_MAX_LIMIT_REACHED, CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, CUPTI_ERROR_NOT_INITIALIZED);
  printf("THREAD_ID_TYPE_SYSTEM=%d\n", CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  printf("sizeof API=%zu Kernel=%zu Memcpy=%zu Memset=%zu Sync=%zu\n", sizeof(CUpti_ActivityAPI), sizeof(CUpti_ActivityKernel10), sizeof(CUpti_ActivityMemcpy6), sizeof(CUpti_ActivityMemset4), sizeof(CUpti_ActivitySynchronization2));
  O(CUpti_ActivityAPI,kind); O(CUpti_ActivityAPI,cbid); O(CUpti_ActivityAPI,start); O(CUpti_ActivityAPI,end); O(CUpti_ActivityAPI,processId); O(CUpti_ActivityAPI,threadId); O(CUpti_ActivityAPI,correlationId);
  O(CUpti_ActivityKernel10,start); O(CUpti_ActivityKernel10,end); O(CUpti_ActivityKernel10,deviceId); O(CUpti_ActivityKernel10,contextId); O(CUpti_ActivityKernel10,streamId);O(CUpti_ActivityKernel10,gridX);O(CUpti_ActivityKernel10,blockX); O(CUpti_ActivityKernel10,correlationId); O(CUpti_ActivityKernel10,name); O(CUpti_ActivityKernel10,graphNodeId); O(CUpti_ActivityKernel10,graphId);
  O(CUpti_ActivityMemcpy6,copyKind); O(CUpti_ActivityMemcpy6,bytes); O(CUpti_ActivityMemcpy6,start); O(CUpti_ActivityMemcpy6,end); O(CUpti_ActivityMemcpy6,deviceId); O(CUpti_ActivityMemcpy6,streamId); O(CUpti_ActivityMemcpy6,correlationId); O(CUpti_ActivityMemcpy6,graphNodeId); O(CUpti_ActivityMemcpy6,graphId);
  O(CUpti_ActivityMemset4,bytes); O(CUpti_ActivityMemset4,start); O(CUpti_ActivityMemset4,end); O(CUpti_ActivityMemset4,deviceId); O(CUpti_ActivityMemset4,streamId); O(CUpti_ActivityMemset4,correlationId); O(CUpti_ActivityMemset4,graphNodeId); O(CUpti_ActivityMemset4,graphId);
  O(CUpti_ActivitySynchronization2,type); O(CUpti_ActivitySynchronization2,start); O(CUpti_ActivitySynchronization2,end); O(CUpti_ActivitySynchronization2,correlationId); O(CUpti_ActivitySynchronization2,contextId); O(CUpti_ActivitySynchronization2,streamId);
  return 0;
}
C
echo "== headers: which record versions exist"
grep -ho 'CUpti_ActivityKernel[0-9]*\b' $CUPTI_INC/cupti_activity.h | sort -u | tail -3
grep -ho 'CUpti_ActivityMemcpy[0-9]*\b' $CUPTI_INC/cupti_activity.h | sort -u | tail -3
grep -ho 'CUpti_ActivityMemset[0-9]*\b' $CUPTI_INC/cupti_activity.h | sort -u | tail -3
grep -ho 'CUpti_ActivitySynchronization[0-9]*\b' $CUPTI_INC/cupti_activity.h | sort -u | tail -3
grep -n 'cuptiActivityRegisterTimestampCallback\|cuptiActivityFlushPeriod\|cuptiSetThreadIdType\|CUpti_TimestampCallbackFunc' $CUPTI_INC/*.h | head
echo "== compile"
gcc -I$CUPTI_INC -I$CUDA_INC -o /tmp/abi /tmp/abi.c 2>&1 | tail -20 && /tmp/abi
echo "== library symbols"
for l in /usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so $(find "$site/nvidia" -name 'libcupti.so*' | head -1); do
  echo "-- $l"; nm -D --defined-only "$l" 2>/dev/null | grep -c ' T cupti'; nm -D --defined-only "$l" | grep -E 'cuptiActivityRegisterTimestampCallback|cuptiActivityFlushPeriod|cuptiSetThreadIdType|cuptiFinalize|cuptiActivityGetNextRecord|cuptiSubscribe$|cuptiGetTimestamp'
done
echo "== does torch map libcupti by itself?"
python3 - <<'P'
import torch, os
x = torch.ones(10, device='cuda'); torch.cuda.synchronize()
m = open('/proc/self/maps').read()
print('cupti mapped:', sorted({l.split()[-1] for l in m.splitlines() if 'cupti' in l}))
print('cudart mapped:', sorted({l.split()[-1] for l in m.splitlines() if 'cudart' in l}))
P
ldd $(python3 -c 'import torch,os; print(os.path.join(os.path.dirname(torch.__file__),"lib","libtorch_cuda.so"))') | grep -i 'cupti\|cudart'
cat /etc/os-release | head -2; ldd --version | head -1
