{{/*
Tokenizer sources (values.tokenizers). Each source is {spec} or
{configMap|volume, subPath}; a directory source is mounted at
/etc/tollgate/tokenizers/<name> and named as hf:<that path>/<subPath>.
*/}}

{{/* tollgate.tokenizerSpec: the --tokenizer spec of one source. Args: dict "src" "name" "what". */}}
{{- define "tollgate.tokenizerSpec" -}}
{{- $src := .src -}}
{{- $n := 0 -}}
{{- range $k := list "spec" "configMap" "volume" -}}
{{- if index $src $k -}}{{- $n = add1 $n -}}{{- end -}}
{{- end -}}
{{- if ne $n 1 -}}
{{- fail (printf "%s: set exactly one of spec, configMap and volume" .what) -}}
{{- end -}}
{{- if (get $src "spec") -}}
{{- if and (get $src "subPath") (not (hasPrefix "hf:" (get $src "spec"))) -}}{{- fail (printf "%s: subPath needs configMap or volume" .what) -}}{{- end -}}
{{- (get $src "spec") -}}
{{- else -}}
{{- printf "hf:/etc/tollgate/tokenizers/%s" .name -}}{{- with (get $src "subPath") -}}/{{ trimPrefix "/" . }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* tollgate.tokenizerArgs: the --tokenizer and --model-tokenizer arguments. */}}
{{- define "tollgate.tokenizerArgs" -}}
{{- $t := .Values.tokenizers }}
- {{ printf "--tokenizer=%s" (include "tollgate.tokenizerSpec" (dict "src" $t.default "name" "default" "what" "tokenizers.default")) | quote }}
{{- range $i, $m := $t.models }}
- {{ printf "--model-tokenizer=%s=%s" $m.model (include "tollgate.tokenizerSpec" (dict "src" $m "name" (toString $i) "what" (printf "tokenizers.models[%d] (%s)" $i $m.model))) | quote }}
{{- end }}
{{- end -}}

{{/* tollgate.tokenizerSources: name => source for every directory source. */}}
{{- define "tollgate.tokenizerMounts" -}}
{{- $t := .Values.tokenizers }}
{{- if or (get $t.default "configMap") (get $t.default "volume") }}
- name: tokenizer-default
  mountPath: /etc/tollgate/tokenizers/default
  readOnly: true
{{- end }}
{{- range $i, $m := $t.models }}
{{- if or (get $m "configMap") (get $m "volume") }}
- name: {{ printf "tokenizer-%d" $i }}
  mountPath: {{ printf "/etc/tollgate/tokenizers/%d" $i }}
  readOnly: true
{{- end }}
{{- end }}
{{- end -}}

{{/* tollgate.tokenizerVolumes: the pod volumes of directory sources. */}}
{{- define "tollgate.tokenizerVolumes" -}}
{{- $t := .Values.tokenizers }}
{{- $all := list (dict "name" "tokenizer-default" "src" $t.default) }}
{{- range $i, $m := $t.models }}
{{- $all = append $all (dict "name" (printf "tokenizer-%d" $i) "src" $m) }}
{{- end }}
{{- range $all }}
{{- if (get .src "configMap") }}
- name: {{ .name }}
  configMap:
    name: {{ (get .src "configMap") }}
{{- else if (get .src "volume") }}
- name: {{ .name }}
  {{- toYaml (get .src "volume") | nindent 2 }}
{{- end }}
{{- end }}
{{- end -}}
