{{/*
The RBAC of the grants in `config`, derived as `reconciler-host rbac` derives it
(host/src/cli/rbac/: mod.rs and impersonation.rs say why each rule is there). The chart runs nothing at
install, so the derivation is written twice; tests/tests/chart.rs renders both for a set of
configurations and requires the same objects, rule for rule. Change one, change the other.

Helm templates return text: structured values pass between these helpers as JSON.
Sorting: the Rust side keys rules by (group, resource) and groups them by (group, verbs) in
BTreeMaps; here the keys are "GROUP RESOURCE" and "GROUP VERB,VERB" strings sorted byte-wise,
which orders the same because the space sorts before every character of a group, a resource
or a verb, and the comma before every character of a verb.
*/}}

{{/* "group/version/Kind" or "version/Kind" (the core group) → {group, kind} as JSON. */}}
{{- define "reconciler-host.rbac.kind" -}}
{{- $parts := splitList "/" . -}}
{{- if eq (len $parts) 2 -}}
{{- dict "group" "" "kind" (index $parts 1) | toJson -}}
{{- else -}}
{{- dict "group" (index $parts 0) "kind" (index $parts 2) | toJson -}}
{{- end -}}
{{- end -}}

{{/* A kind's resource: the API machinery's guess (lowercase, -es after s, -ies for -y, else -s). */}}
{{- define "reconciler-host.rbac.plural" -}}
{{- $s := lower . -}}
{{- if hasSuffix "s" $s -}}{{ $s }}es
{{- else if hasSuffix "y" $s -}}{{ trimSuffix "y" $s }}ies
{{- else -}}{{ $s }}s
{{- end -}}
{{- end -}}

{{/* A write target: a kind, or a lower-case subresource after it → {group, resource} as JSON. */}}
{{- define "reconciler-host.rbac.target" -}}
{{- $parts := splitList "/" . -}}
{{- $last := last $parts -}}
{{- $sub := "" -}}
{{- if and (gt (len $parts) 2) (regexMatch "^[a-z]" $last) (regexMatch "^[A-Z]" (index $parts (sub (len $parts) 2))) -}}
{{- $sub = $last -}}
{{- $parts = initial $parts -}}
{{- end -}}
{{- $kind := include "reconciler-host.rbac.kind" (join "/" $parts) | fromJson -}}
{{- $resource := include "reconciler-host.rbac.plural" $kind.kind -}}
{{- if $sub -}}{{- $resource = printf "%s/%s" $resource $sub -}}{{- end -}}
{{- dict "group" $kind.group "resource" $resource "sub" $sub | toJson -}}
{{- end -}}

{{/*
Rules of `read` and `write` entries (a kind's verbs: its `writeVerbs` entry, else all three) after
`extra` ([[group, resource, [verbs]]...]), merged per group and resource, grouped per group and
verbs: a JSON list of PolicyRules.
*/}}
{{- define "reconciler-host.rbac.rules" -}}
{{- $writeVerbs := .writeVerbs | default dict -}}
{{- $verbs := dict -}}
{{- range .extra -}}
{{- $key := printf "%s %s" (index . 0) (index . 1) -}}
{{- $_ := set $verbs $key (concat (get $verbs $key | default (list)) (index . 2)) -}}
{{- end -}}
{{- range .read -}}
{{- $kind := include "reconciler-host.rbac.kind" . | fromJson -}}
{{- $key := printf "%s %s" $kind.group (include "reconciler-host.rbac.plural" $kind.kind) -}}
{{- $_ := set $verbs $key (concat (get $verbs $key | default (list)) (list "get" "list" "watch")) -}}
{{- end -}}
{{- range .write -}}
{{- $target := include "reconciler-host.rbac.target" . | fromJson -}}
{{- $key := printf "%s %s" $target.group $target.resource -}}
{{- $more := list "patch" -}}
{{- if eq $target.sub "" -}}{{- $more = get $writeVerbs . | default (list "create" "patch" "delete") -}}{{- end -}}
{{- $_ := set $verbs $key (concat (get $verbs $key | default (list)) $more) -}}
{{- end -}}
{{- $grouped := dict -}}
{{- range $key := keys $verbs | sortAlpha -}}
{{- $split := splitn " " 2 $key -}}
{{- $group := printf "%s %s" $split._0 (get $verbs $key | uniq | sortAlpha | join ",") -}}
{{- $_ := set $grouped $group (append (get $grouped $group | default (list)) $split._1) -}}
{{- end -}}
{{- $rules := list -}}
{{- range $key := keys $grouped | sortAlpha -}}
{{- $split := splitn " " 2 $key -}}
{{- $rules = append $rules (dict "apiGroups" (list $split._0) "resources" (get $grouped $key) "verbs" (splitList "," $split._1)) -}}
{{- end -}}
{{- toJson $rules -}}
{{- end -}}

{{/* The rules with each verb as constrained impersonation asks for it on the target. */}}
{{- define "reconciler-host.rbac.impersonateOn" -}}
{{- $out := list -}}
{{- range . -}}
{{- $verbs := list -}}
{{- range .verbs -}}{{- $verbs = append $verbs (printf "impersonate-on:serviceaccount:%s" .) -}}{{- end -}}
{{- $out = append $out (merge (dict "verbs" $verbs) (omit . "verbs")) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The rule to impersonate ServiceAccount .name (every one of the Role's namespace when empty). */}}
{{- define "reconciler-host.rbac.impersonate" -}}
{{- $rule := dict "resources" (list "serviceaccounts") -}}
{{- if eq .mode "legacy" -}}
{{- $_ := set $rule "apiGroups" (list "") -}}
{{- $_ := set $rule "verbs" (list "impersonate") -}}
{{- else -}}
{{- $_ := set $rule "apiGroups" (list "authentication.k8s.io") -}}
{{- $_ := set $rule "verbs" (list "impersonate:serviceaccount") -}}
{{- end -}}
{{- if .names -}}{{- $_ := set $rule "resourceNames" .names -}}{{- end -}}
{{- toJson $rule -}}
{{- end -}}

{{/* A [Cluster]Role of .rules and its binding to .subject: a JSON list of two objects. */}}
{{- define "reconciler-host.rbac.bound" -}}
{{- $meta := dict "name" .name -}}
{{- if .namespace -}}{{- $_ := set $meta "namespace" .namespace -}}{{- end -}}
{{- $kind := ternary "Role" "ClusterRole" (ne .namespace "") -}}
{{- list
  (dict "apiVersion" "rbac.authorization.k8s.io/v1" "kind" $kind "metadata" $meta "rules" .rules)
  (dict "apiVersion" "rbac.authorization.k8s.io/v1" "kind" (printf "%sBinding" $kind) "metadata" $meta
    "roleRef" (dict "apiGroup" "rbac.authorization.k8s.io" "kind" $kind "name" .name)
    "subjects" (list .subject))
  | toJson -}}
{{- end -}}

{{/* Every object of the RBAC, in `reconciler-host rbac`'s order, as a JSON list. */}}
{{- define "reconciler-host.rbac.objects" -}}
{{- $config := .Values.config | default dict -}}
{{- $guests := $config.guests | default dict -}}
{{- $reconcilers := $config.reconcilers -}}
{{- $allow := dict -}}
{{- if $reconcilers -}}{{- $allow = $reconcilers.allow | default dict -}}{{- end -}}
{{- $prefix := default (include "reconciler-host.fullname" .) .Values.rbac.prefix -}}
{{- $namespace := .Release.Namespace -}}
{{- $mode := .Values.rbac.impersonation -}}
{{- $host := dict "kind" "ServiceAccount" "name" (include "reconciler-host.serviceAccountName" .) "namespace" $namespace -}}
{{- $events := list (list "events.k8s.io" "events" (list "create" "patch")) -}}
{{- $objects := list -}}

{{- /* The host itself: events; with identities, the access reviews of their reads. */ -}}
{{- $tenants := list -}}
{{- if kindIs "map" $reconcilers -}}{{- $tenants = $reconcilers.tenants | default (list) -}}{{- end -}}
{{- $identities := or (gt (len ($allow.serviceAccounts | default (list))) 0) (gt (len $tenants) 0) -}}
{{- range $guests -}}{{- if (. | default dict).serviceAccount -}}{{- $identities = true -}}{{- end -}}{{- end -}}
{{- $own := list (dict "apiGroups" (list "events.k8s.io") "resources" (list "events") "verbs" (list "create" "patch")) -}}
{{- if $identities -}}
{{- $own = append $own (dict "apiGroups" (list "authorization.k8s.io") "resources" (list "subjectaccessreviews") "verbs" (list "create")) -}}
{{- end -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" $prefix "namespace" "" "rules" $own "subject" $host) | fromJsonArray) -}}
{{- $lease := list (dict "apiGroups" (list "coordination.k8s.io") "resources" (list "leases") "verbs" (list "get" "list" "watch" "create" "update" "patch" "delete")) -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-leader-election" $prefix) "namespace" $namespace "rules" $lease "subject" $host) | fromJsonArray) -}}

{{- /* One ClusterRole per guest; a guest with its own account gets the objects of impersonation.rs. */ -}}
{{- range $guest := keys $guests | sortAlpha -}}
{{- $grant := get $guests $guest | default dict -}}
{{- $read := $grant.read | default (list) -}}
{{- $write := $grant.write | default (list) -}}
{{- $writeVerbs := $grant.writeVerbs | default dict -}}
{{- $role := printf "%s-guest-%s" $prefix (replace "@" "-at-" $guest) -}}
{{- if $grant.serviceAccount -}}
{{- $account := splitn "/" 2 $grant.serviceAccount -}}
{{- $subject := dict "kind" "ServiceAccount" "name" $account._1 "namespace" $account._0 -}}
{{- $objects = append $objects (dict "apiVersion" "v1" "kind" "ServiceAccount" "metadata" (dict "name" $account._1 "namespace" $account._0)) -}}
{{- $rules := include "reconciler-host.rbac.rules" (dict "read" $read "write" $write "writeVerbs" $writeVerbs "extra" $events) | fromJsonArray -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" $role "namespace" "" "rules" $rules "subject" $subject) | fromJsonArray) -}}
{{- $hostRules := include "reconciler-host.rbac.rules" (dict "read" $read "write" (list) "extra" (list)) | fromJsonArray -}}
{{- if ne $mode "legacy" -}}
{{- $writes := include "reconciler-host.rbac.rules" (dict "read" (list) "write" $write "writeVerbs" $writeVerbs "extra" $events) | fromJsonArray -}}
{{- $hostRules = concat $hostRules (include "reconciler-host.rbac.impersonateOn" $writes | fromJsonArray) -}}
{{- end -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-host" $role) "namespace" "" "rules" $hostRules "subject" $host) | fromJsonArray) -}}
{{- $impersonate := include "reconciler-host.rbac.impersonate" (dict "mode" $mode "names" (list $account._1)) | fromJson -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-impersonate-%s" $prefix (replace "@" "-at-" $guest)) "namespace" $account._0 "rules" (list $impersonate) "subject" $host) | fromJsonArray) -}}
{{- else -}}
{{- $rules := include "reconciler-host.rbac.rules" (dict "read" $read "write" $write "writeVerbs" $writeVerbs "extra" (list)) | fromJsonArray -}}
{{- if $rules -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" $role "namespace" "" "rules" $rules "subject" $host) | fromJsonArray) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* Reconciler objects: followed, their status written; the ceiling's reads, and its writes
unless every guest writes as its own account; impersonation of the accounts it lists. */ -}}
{{- if kindIs "map" $reconcilers -}}
{{- $own := list -}}
{{- range list "clusterreconcilers" "reconcilers" -}}
{{- $own = append $own (list "reconciler.dev" . (list "get" "list" "watch")) -}}
{{- $own = append $own (list "reconciler.dev" (printf "%s/status" .) (list "patch")) -}}
{{- end -}}
{{- if or $tenants $reconcilers.reportUnmatched -}}
{{- /* The namespaces' labels choose tenant rules (and show those no rule selects). */ -}}
{{- $own = append $own (list "" "namespaces" (list "get" "list" "watch")) -}}
{{- end -}}
{{- $required := false -}}
{{- if $config.identity -}}{{- $required = $config.identity.required | default false -}}{{- end -}}
{{- $writes := ternary (list) ($allow.write | default (list)) $required -}}
{{- $rules := include "reconciler-host.rbac.rules" (dict "read" ($allow.read | default (list)) "write" $writes "writeVerbs" ($allow.writeVerbs | default dict) "extra" $own) | fromJsonArray -}}
{{- $accounts := $allow.serviceAccounts | default (list) -}}
{{- if and $accounts (ne $mode "legacy") -}}
{{- $on := include "reconciler-host.rbac.rules" (dict "read" (list) "write" ($allow.write | default (list)) "writeVerbs" ($allow.writeVerbs | default dict) "extra" $events) | fromJsonArray -}}
{{- $rules = concat $rules (include "reconciler-host.rbac.impersonateOn" $on | fromJsonArray) -}}
{{- end -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-reconcilers" $prefix) "namespace" "" "rules" $rules "subject" $host) | fromJsonArray) -}}
{{- $namespaces := list -}}
{{- range $accounts -}}{{- $namespaces = append $namespaces (splitn "/" 2 .)._0 -}}{{- end -}}
{{- range $ns := $namespaces | uniq | sortAlpha -}}
{{- $names := list -}}
{{- $all := false -}}
{{- range $accounts -}}
{{- $account := splitn "/" 2 . -}}
{{- if eq $account._0 $ns -}}
{{- if eq $account._1 "*" -}}{{- $all = true -}}{{- else -}}{{- $names = append $names $account._1 -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $rule := include "reconciler-host.rbac.impersonate" (dict "mode" $mode "names" (ternary (list) $names $all)) | fromJson -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-impersonate-reconcilers" $prefix) "namespace" $ns "rules" (list $rule) "subject" $host) | fromJsonArray) -}}
{{- end -}}
{{- /* Each tenant rule: the host reads what it allows and impersonates its account, by name, in
any namespace, for the writes it allows; the account of each namespace it names gets the rule's
reads and writes through the ClusterRole PREFIX-tenant-N, and the host may impersonate every
account there (spec.serviceAccountName) through PREFIX-tenant-N-accounts (in the namespaces a
selector chooses, the administrator binds both). */ -}}
{{- range $i, $rule := $tenants -}}
{{- $ruleAllow := $rule.allow | default dict -}}
{{- $account := $rule.serviceAccount | default "reconciler" -}}
{{- $hostRules := include "reconciler-host.rbac.rules" (dict "read" ($ruleAllow.read | default (list)) "write" (list) "extra" (list)) | fromJsonArray -}}
{{- if ne $mode "legacy" -}}
{{- $on := include "reconciler-host.rbac.rules" (dict "read" (list) "write" ($ruleAllow.write | default (list)) "writeVerbs" ($ruleAllow.writeVerbs | default dict) "extra" $events) | fromJsonArray -}}
{{- $hostRules = concat $hostRules (include "reconciler-host.rbac.impersonateOn" $on | fromJsonArray) -}}
{{- end -}}
{{- $hostRules = append $hostRules (include "reconciler-host.rbac.impersonate" (dict "mode" $mode "names" (list $account)) | fromJson) -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-tenant-%d-host" $prefix $i) "namespace" "" "rules" $hostRules "subject" $host) | fromJsonArray) -}}
{{- $tenantRole := printf "%s-tenant-%d" $prefix $i -}}
{{- $tenantRules := include "reconciler-host.rbac.rules" (dict "read" ($ruleAllow.read | default (list)) "write" ($ruleAllow.write | default (list)) "writeVerbs" ($ruleAllow.writeVerbs | default dict) "extra" $events) | fromJsonArray -}}
{{- $objects = append $objects (dict "apiVersion" "rbac.authorization.k8s.io/v1" "kind" "ClusterRole" "metadata" (dict "name" $tenantRole) "rules" $tenantRules) -}}
{{- $accounts := printf "%s-accounts" $tenantRole -}}
{{- $anyAccount := include "reconciler-host.rbac.impersonate" (dict "mode" $mode "names" (list)) | fromJson -}}
{{- $objects = append $objects (dict "apiVersion" "rbac.authorization.k8s.io/v1" "kind" "ClusterRole" "metadata" (dict "name" $accounts) "rules" (list $anyAccount)) -}}
{{- range $ns := $rule.namespaces | default (list) -}}
{{- $objects = append $objects (dict "apiVersion" "v1" "kind" "ServiceAccount" "metadata" (dict "name" $account "namespace" $ns)) -}}
{{- $objects = append $objects (dict "apiVersion" "rbac.authorization.k8s.io/v1" "kind" "RoleBinding" "metadata" (dict "name" $tenantRole "namespace" $ns)
  "roleRef" (dict "apiGroup" "rbac.authorization.k8s.io" "kind" "ClusterRole" "name" $tenantRole)
  "subjects" (list (dict "kind" "ServiceAccount" "name" $account "namespace" $ns))) -}}
{{- $objects = append $objects (dict "apiVersion" "rbac.authorization.k8s.io/v1" "kind" "RoleBinding" "metadata" (dict "name" $accounts "namespace" $ns)
  "roleRef" (dict "apiGroup" "rbac.authorization.k8s.io" "kind" "ClusterRole" "name" $accounts)
  "subjects" (list $host)) -}}
{{- end -}}
{{- end -}}
{{- $secrets := $reconcilers.pullSecrets | default (list) | uniq | sortAlpha -}}
{{- if $secrets -}}
{{- $rule := dict "apiGroups" (list "") "resources" (list "secrets") "resourceNames" $secrets "verbs" (list "get") -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-pull-secrets" $prefix) "namespace" $namespace "rules" (list $rule) "subject" $host) | fromJsonArray) -}}
{{- end -}}
{{- end -}}

{{- /* Exactly the Secrets and ConfigMaps the http rules take credentials and CA bundles from:
the grants', the Reconcilers' ceiling's and each tenant rule's. */ -}}
{{- $httpRules := list -}}
{{- range $guests -}}{{- $httpRules = concat $httpRules ((. | default dict).http | default (list)) -}}{{- end -}}
{{- $httpRules = concat $httpRules ($allow.http | default (list)) -}}
{{- range $tenants -}}{{- $httpRules = concat $httpRules (((. | default dict).allow | default dict).http | default (list)) -}}{{- end -}}
{{- $secrets := list -}}
{{- $configMaps := list -}}
{{- range $httpRules -}}
{{- $named := values (.headers | default dict) -}}
{{- with .bearerToken -}}{{- $named = append $named . -}}{{- end -}}
{{- with .caBundle -}}{{- $named = append $named . -}}{{- end -}}
{{- range $named -}}
{{- if .secretKeyRef -}}{{- $secrets = append $secrets .secretKeyRef.name -}}{{- end -}}
{{- if .configMapKeyRef -}}{{- $configMaps = append $configMaps .configMapKeyRef.name -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $credentials := list -}}
{{- if $secrets -}}
{{- $credentials = append $credentials (dict "apiGroups" (list "") "resources" (list "secrets") "resourceNames" ($secrets | uniq | sortAlpha) "verbs" (list "get")) -}}
{{- end -}}
{{- if $configMaps -}}
{{- $credentials = append $credentials (dict "apiGroups" (list "") "resources" (list "configmaps") "resourceNames" ($configMaps | uniq | sortAlpha) "verbs" (list "get")) -}}
{{- end -}}
{{- if $credentials -}}
{{- $objects = concat $objects (include "reconciler-host.rbac.bound" (dict "name" (printf "%s-http-credentials" $prefix) "namespace" $namespace "rules" $credentials "subject" $host) | fromJsonArray) -}}
{{- end -}}
{{- toJson $objects -}}
{{- end -}}
