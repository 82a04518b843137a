#!/usr/bin/env bash
# Issuance benchmark (issue 3, issue 17): four-tag P-256 derived credentials per second.
#   testca       the test CA in-process (dcbench issue: TestCA.issue for a batch of requests), on one
#                thread and on one thread per available core
#   openssl-cli  a shell script making the same four certificates per credential with
#                openssl genpkey + req + x509 -req (same extensions), one credential at a time
# Prints the medians and the ratios, and checks that the certificates' profile (openssl x509 -text
# without keys, serial, dates, key identifier and the person's UUID) is the same as the script's.
# SMOKE=1: the debug build, a few credentials, one round (see Benchmarks/common.sh).
source "$(dirname "$0")/common.sh"
if [ "$smoke" = 1 ]; then count=20 rounds=1 cli_count=1; else count=2000 rounds=5 cli_count=5; fi
work=Benchmarks/work/issuance
rm -rf "$work" && mkdir -p "$work"
machine
build_products dcprovision dcbench
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
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,%s\nextendedKeyUsage=%s\nsubjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always\nsubjectAltName=URI:urn:uuid:%s\ncertificatePolicies=2.16.840.1.101.3.2.1.48.%s\n' \
      "$ku" "$eku" "$uuid" "$pol" > "$out/$tag.ext"
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$out/$n-$tag.key"
    openssl req -new -key "$out/$n-$tag.key" -subj "/O=Derived Credentials Test/OU=Derived PIV/CN=Test User" -out "$out/$n-$tag.csr"
    openssl x509 -req -in "$out/$n-$tag.csr" -CA "$ca/issuing.pem" -CAkey "$ca/issuing.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -sha256 -extfile "$out/$tag.ext" -out "$out/$n-$tag.pem" 2>/dev/null
  done
done
SCRIPT
chmod +x "$work/openssl-issue.sh"

# The same profile as the script's, as openssl prints it (our extensions in the script's order).
"$bin/dcprovision" testca issue "$work/ca" --out-dir "$work/ours" >/dev/null
"$work/openssl-issue.sh" "$work/ca" 1 "$work/profile"
profile() {
  openssl x509 "$@" -noout -text -certopt no_pubkey,no_sigdump,no_serial,no_validity |
    sed -e '/Subject Key Identifier/{n;d}' -e 's/urn:uuid:[0-9a-f-]*/urn:uuid:UUID/'
}
for tag in authentication signing encryption escrow; do
  diff <(profile -inform DER -in "$work/ours/$tag.cert.der") <(profile -in "$work/profile/1-$tag.pem") ||
    { echo "the $tag certificate's profile differs from the openssl CLI's" >&2; exit 1; }
done
echo "profile identical to the openssl CLI's (4 certificates, keys, serials, dates, key identifiers and UUIDs aside)"

cores=$(nproc)
# With BEFORE (see common.sh), the earlier build's dcbench issues in the same rounds, as it can
# (its own arguments: CA and count; one thread before issue 17).
python3 - "$dcbench" "$work" "$count" "$rounds" "$cli_count" "$cores" "$before" <<'PY'
import re, statistics, subprocess, sys, time
dcbench, work, count, rounds, cli_count, cores, before = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
def rate(width, tool=dcbench):
    out = subprocess.run([tool, "issue", f"{work}/ca", count] + ([width] if width else []), check=True, capture_output=True, text=True).stdout
    return float(re.search(r"([0-9.]+) credentials/s", out).group(1))
one, every, theirs, earlier = [], [], [], []
for _ in range(rounds):
    one.append(rate("1"))
    every.append(rate(cores))
    if before:
        earlier.append(rate(None, f"{before}/dcbench"))
    start = time.perf_counter()
    subprocess.run([f"{work}/openssl-issue.sh", f"{work}/ca", str(cli_count), f"{work}/openssl"], check=True)
    theirs.append(cli_count / (time.perf_counter() - start))
o, e, t = statistics.median(one), statistics.median(every), statistics.median(theirs)
print(f"testca, 1 thread:   {o:.0f} credentials/s  (runs: {', '.join(f'{x:.0f}' for x in one)})")
print(f"testca, {cores} threads:  {e:.0f} credentials/s  (runs: {', '.join(f'{x:.0f}' for x in every)})")
print(f"openssl-cli script: {t:.2f} credentials/s  (runs: {', '.join(f'{x:.2f}' for x in theirs)})")
if before:
    b = statistics.median(earlier)
    print(f"before (its dcbench): {b:.0f} credentials/s  (runs: {', '.join(f'{x:.0f}' for x in earlier)})")
    print(f"speed-up, test CA issuance: before {b:.0f}/s, after {e:.0f}/s on {cores} threads: {e / b:.2f}x (same rounds)")
open(f"{work}/rates", "w").write(f"{o:.0f} {e:.0f} {t:.2f}\n")
PY
read -r one all cli < "$work/rates"
printf 'testca on %s threads / 1 thread: %.2fx\n' "$cores" "$(python3 -c "print($all / $one)")"
printf 'testca / openssl-cli script: %.0fx\n' "$(python3 -c "print($all / $cli)")"
goal "testca credentials/s on every core" "$all" ">=" 2000
