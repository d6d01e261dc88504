# apt-mirror.sh — sourced by the scripts that build Debian images from the
# archive apt already uses (scripts/hosts-image.sh, scripts/vm-image.sh).
# Needs SUITE set (e.g. bookworm).

# mirror prints the URI apt uses for the suite's main archive (not the
# security archive), from either sources format.
mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		awk -v s="$SUITE" '$1 == "deb" {
			i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
			if ($(i+1) == s) { print $i; exit }
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -r "$f" ] || continue
		# deb822 stanzas are separated by blank lines.
		awk -v s="$SUITE" 'BEGIN { RS = "" } {
			uris = ""; ok = 0; n = split($0, l, "\n")
			for (j = 1; j <= n; j++) {
				if (l[j] ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", l[j]); split(l[j], u, /[ \t]+/); uris = u[1] }
				if (l[j] ~ /^Suites:/) { m = split(l[j], w, /[ \t]+/); for (k = 2; k <= m; k++) if (w[k] == s) ok = 1 }
			}
			if (ok && uris != "") { print uris; exit }
		}' "$f"
	done
}
