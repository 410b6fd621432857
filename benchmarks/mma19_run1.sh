#!/bin/bash
# Issue 17, branch mma19, first GPU call: the sweep, then one ncu comparison of gemm_wgmma (4096^3 against
# 4000x4000x4096) and ncu of three mma.sync-fed-by-TMA variants. Run from the repository root with
# PYTHONPATH=$PWD TORCH_CUDA_ARCH_LIST=9.0a; writes under $1.
O=$1
{ nvidia-smi; nvidia-smi -q -d CLOCK | grep -A4 "Max Clocks"; } > $O/log.txt 2>&1
timeout 165 python3 benchmarks/mma19_sweep.py $O --parts wg,mma >> $O/log.txt 2>&1
echo "sweep rc $?" >> $O/log.txt
timeout 55 ncu --set full --clock-control none -k regex:gemm_wgmma -o $O/ncu_wg python3 benchmarks/mma19_ncu.py wg >> $O/log.txt 2>&1
echo "ncu wg rc $?" >> $O/log.txt
ncu -i $O/ncu_wg.ncu-rep --page details > $O/ncu_wg.txt 2>&1
ncu -i $O/ncu_wg.ncu-rep --page raw --csv > $O/ncu_wg_raw.csv 2>&1
timeout 60 ncu --set full --clock-control none -k regex:mma_tma -o $O/ncu_mma python3 benchmarks/mma19_ncu.py mma \
    mma_tma_256x128 mma_tma_256x128_pf mma_tma_128x128_x2 >> $O/log.txt 2>&1
echo "ncu mma rc $?" >> $O/log.txt
ncu -i $O/ncu_mma.ncu-rep --page details > $O/ncu_mma.txt 2>&1
rm -f $O/ncu_mma.ncu-rep
tail -60 $O/mma19_wg_mma.md; grep "rc " $O/log.txt
