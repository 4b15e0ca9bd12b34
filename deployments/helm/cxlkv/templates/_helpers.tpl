{{/* Names, labels and the pieces several templates share. */}}

{{- define "cxlkv.name" -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "cxlkv.labels" -}}
app.kubernetes.io/name: cxlkv
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: cxlkv.selector (dict "ctx" . "component" "controller") */}}
{{- define "cxlkv.selector" -}}
app.kubernetes.io/name: cxlkv
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "cxlkv.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The service account of a component: cxlkv.sa (dict "ctx" . "component" "kubeletplugin") */}}
{{- define "cxlkv.sa" -}}
{{- printf "%s-%s" (include "cxlkv.name" .ctx) .component -}}
{{- end -}}

{{/* Fabric manager URL, credentials and CA as the binaries read them from
     the environment (CXLKV_FABRIC_URL, _USER, _PASSWORD, _CA). */}}
{{- define "cxlkv.fabricEnv" -}}
- name: CXLKV_FABRIC_URL
  value: {{ .Values.fabricManager.url | quote }}
{{- with .Values.fabricManager.credentialsSecret }}
{{- if .name }}
- name: CXLKV_FABRIC_USER
  valueFrom: {secretKeyRef: {name: {{ .name }}, key: {{ .usernameKey | default "username" }}}}
- name: CXLKV_FABRIC_PASSWORD
  valueFrom: {secretKeyRef: {name: {{ .name }}, key: {{ .passwordKey | default "password" }}}}
{{- end }}
{{- end }}
{{- if .Values.fabricManager.caSecret.name }}
- name: CXLKV_FABRIC_CA
  value: /etc/cxlkv/fabric-ca/{{ .Values.fabricManager.caSecret.key | default "ca.crt" }}
{{- end }}
{{- end -}}

{{- define "cxlkv.fabricCAVolumeMount" -}}
{{- if .Values.fabricManager.caSecret.name -}}
- {name: fabric-ca, mountPath: /etc/cxlkv/fabric-ca, readOnly: true}
{{- end }}
{{- end -}}

{{- define "cxlkv.fabricCAVolume" -}}
{{- if .Values.fabricManager.caSecret.name -}}
- name: fabric-ca
  secret: {secretName: {{ .Values.fabricManager.caSecret.name }}, defaultMode: 0440}
{{- end }}
{{- end -}}

{{/* What no container of this chart needs: privilege escalation, a writable
     root file system, Linux capabilities (hostd's devdax backend is the one
     exception; see hostd.yaml). */}}
{{- define "cxlkv.restrictedContainer" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}
