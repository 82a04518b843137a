#!/usr/bin/env bash
# Issuance benchmark (issue 3): four-tag P-256 derived credentials per second.
#   testca       the test CA in-process (dcbench issue: TestCA.issue in a loop, release build)
#   openssl-cli  a shell script making the same four certificates per credential with
#                openssl genpkey + req + x509 -req (same extensions), one credential at a time
# Prints the medians and the ratio. Needs python3 and the openssl CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
work=Benchmarks/work/issuance
rm -rf "$work" && mkdir -p "$work"
swift build -c release --product dcprovision >/dev/null
swift build -c release --product dcbench >/dev/null
bin=$(swift build -c release --show-bin-path)
"$bin/dcprovision" testca init "$work/ca" >/dev/null

cat > "$work/openssl-issue.sh" <<'SCRIPT'
#!/usr/bin/env bash
# Issues N four-tag credentials from the test CA in $1 with the openssl CLI, into $3.
set -e
ca=$1 count=$2 out=$3
mkdir -p "$out"
for n in $(seq 1 "$count"); do
  uuid=$(cat /proc/sys/kernel/random/uuid)
  for tag in authentication signing encryption escrow; do
    case $tag in
      authentication) ku=digitalSignature; eku=clientAuth,1.3.6.1.4.1.311.20.2.2,1.3.6.1.5.2.3.4; pol=1 ;;
      signing) ku=digitalSignature,nonRepudiation; eku=emailProtection,1.3.6.1.5.5.7.3.36; pol=2 ;;
      *) ku=keyAgreement; eku=emailProtection; pol=3 ;;
    esac
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,%s\nextendedKeyUsage=%s\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always\ncertificatePolicies=2.16.840.1.101.3.2.1.48.%s\nsubjectAltName=URI:urn:uuid:%s\n' \
      "$ku" "$eku" "$pol" "$uuid" > "$out/$tag.ext"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$out/$n-$tag.key"
    openssl req -new -key "$out/$n-$tag.key" -subj "/O=Derived Credentials Test/OU=Derived PIV/CN=Test User" -out "$out/$n-$tag.csr"
    openssl x509 -req -in "$out/$n-$tag.csr" -CA "$ca/issuing.pem" -CAkey "$ca/issuing.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -sha256 -extfile "$out/$tag.ext" -out "$out/$n-$tag.pem" 2>/dev/null
  done
done
SCRIPT
chmod +x "$work/openssl-issue.sh"

python3 - "$bin/dcbench" "$work" <<'PY'
import re, statistics, subprocess, sys, time
dcbench, work = sys.argv[1], sys.argv[2]
ours, theirs = [], []
for _ in range(5):
    out = subprocess.run([dcbench, "issue", f"{work}/ca", "500"], check=True, capture_output=True, text=True).stdout
    ours.append(float(re.search(r"([0-9.]+) credentials/s", out).group(1)))
    start = time.perf_counter()
    subprocess.run([f"{work}/openssl-issue.sh", f"{work}/ca", "5", f"{work}/openssl"], check=True)
    theirs.append(5 / (time.perf_counter() - start))
o, t = statistics.median(ours), statistics.median(theirs)
print(f"testca (in-process): {o:.0f} credentials/s  (runs: {', '.join(f'{x:.0f}' for x in ours)})")
print(f"openssl-cli script:  {t:.2f} credentials/s  (runs: {', '.join(f'{x:.2f}' for x in theirs)})")
print(f"ratio: {o / t:.0f}x  (goals: >= 500 credentials/s, >= 50x the script)")
PY
