#!/usr/bin/env bash
# Lists hooked symbols that share an address in the real libraries (one
# uprobe, two meanings). Usage: aliases.sh hooked-symbols.txt
set -u
cudart=$(python3 -c "import nvidia, os; print(os.path.join(os.path.dirname(nvidia.__path__[0]), 'nvidia/cu13/lib/libcudart.so.13'))" 2>/dev/null)
[ -f "$cudart" ] || cudart=$(ls /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13)
cuda=$(ls /usr/local/nvidia/lib64/libcuda.so.1)
for lib in "$cudart" "$cuda"; do
	echo "== $lib"
	readelf -W --dyn-syms "$lib" | awk '$4=="FUNC" && $7!="UND" {sub(/@.*/,"",$8); print $2, $8}' | sort > /tmp/syms.txt
	awk 'NR==FNR {want[$2]=1; next} ($2 in want)' "$1" /tmp/syms.txt | sort | awk '{a[$1]=a[$1]" "$2; n[$1]++} END {for (k in a) if (n[k]>1) print k, a[k]}'
done
