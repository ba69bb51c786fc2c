# Source this (bash) to run the bundle's programs: `source env.sh; optimus-cc ...`, or run
# one command with it: `./run.sh optimus-cc ...`, `./run.sh mpirun -np 2 optimus-cc ...`.
# It puts the bundle's Debian libraries first in LD_LIBRARY_PATH, which other programs of
# the machine (python3 with torch) should not see: prefer run.sh, which scopes it.
OCC_BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OCC_BUNDLE
export PATH="$OCC_BUNDLE/bin:$PATH"
# Libraries that travel gzipped (lib/NAME.gz: OpenBLAS) are unpacked on first use into
# $OCC_BUNDLE_CACHE (default: a folder under TMPDIR named after this bundle's MANIFEST),
# never into the bundle, which stays as small as it travelled.
_occ_cache=
if compgen -G "$OCC_BUNDLE/lib/*.gz" > /dev/null; then
  _occ_cache=${OCC_BUNDLE_CACHE:-${TMPDIR:-/tmp}/occ-bundle-$(id -u)-$(cksum < "$OCC_BUNDLE/MANIFEST" | cut -d' ' -f1)}
  mkdir -p "$_occ_cache" || echo "env.sh: cannot create $_occ_cache (OCC_BUNDLE_CACHE)" >&2
  for _gz in "$OCC_BUNDLE"/lib/*.gz; do
    _lib=$_occ_cache/$(basename "${_gz%.gz}")
    [[ -s $_lib ]] && continue
    if { gzip -dc "$_gz" 2> /dev/null || "${OCC_PYTHON:-python3}" -c 'import gzip, shutil, sys
shutil.copyfileobj(gzip.open(sys.argv[1]), sys.stdout.buffer)' "$_gz"; } > "$_lib.tmp.$$"; then
      mv -f "$_lib.tmp.$$" "$_lib"
    else
      rm -f "$_lib.tmp.$$"
      echo "env.sh: cannot unpack $_gz into $_occ_cache" >&2
    fi
  done
  unset _gz _lib
fi
# Open MPI, relocated: components, help files, configuration and orted from the bundle.
export OPAL_PREFIX="$OCC_BUNDLE" OPAL_EXEC_PREFIX="$OCC_BUNDLE" OPAL_BINDIR="$OCC_BUNDLE/bin" \
  OPAL_LIBDIR="$OCC_BUNDLE/lib" OPAL_PKGLIBDIR="$OCC_BUNDLE/lib/openmpi3" \
  OPAL_DATAROOTDIR="$OCC_BUNDLE/share" OPAL_DATADIR="$OCC_BUNDLE/share" \
  OPAL_PKGDATADIR="$OCC_BUNDLE/share/openmpi" OPAL_SYSCONFDIR="$OCC_BUNDLE/etc"
export OMPI_MCA_mca_base_component_path="$OCC_BUNDLE/lib/openmpi3"
# The bundled libpmix looks for its optional components in Debian's folder, which a machine
# may hold from another PMIx version (seen on the GPU machine: a zlib component that fails
# to load, then a warning that nothing compresses). None is needed on one machine.
export PMIX_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The bundle carries no oneDNN (40 MB, over its size limit): the CPU's matrix products use
# the bundle's OpenBLAS, not a libdnnl the machine may have outside it.
export OCC_CPU_GEMM=${OCC_CPU_GEMM:-openblas}
# CUDA's libraries (cuda-libs.txt: what the binaries need) come from the machine: the
# toolkit, the pip nvidia-* packages of its python3, or the driver's folder. Found once,
# then kept in OCC_CUDA_LIBDIRS (set it yourself to override).
if [[ -z ${OCC_CUDA_LIBDIRS+x} ]]; then
  OCC_CUDA_LIBDIRS=
  _occ_candidates=()
  for _d in ${CUDA_HOME:+"$CUDA_HOME/lib64"} ${CUDA_PATH:+"$CUDA_PATH/lib64"} /usr/local/cuda/lib64 \
      /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [[ -d $_d ]] && _occ_candidates+=("$_d")
  done
  _occ_site=$(timeout 60 "${OCC_PYTHON:-python3}" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2> /dev/null || true)
  for _d in "$_occ_site"/nvidia/*/lib "$_occ_site"/nvidia/cu*/lib; do
    [[ -d $_d ]] && _occ_candidates+=("$_d")
  done
  while read -r _lib; do
    [[ -n $_lib ]] || continue
    for _d in "${_occ_candidates[@]}"; do
      if [[ -e $_d/$_lib ]]; then
        case ":$OCC_CUDA_LIBDIRS:" in *":$_d:"*) ;; *) OCC_CUDA_LIBDIRS=${OCC_CUDA_LIBDIRS:+$OCC_CUDA_LIBDIRS:}$_d ;; esac
        break
      fi
    done
  done < "$OCC_BUNDLE/cuda-libs.txt"
  unset _d _lib _occ_site _occ_candidates
fi
export OCC_CUDA_LIBDIRS
export LD_LIBRARY_PATH="$OCC_BUNDLE/lib${_occ_cache:+:$_occ_cache}${OCC_CUDA_LIBDIRS:+:$OCC_CUDA_LIBDIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset _occ_cache
