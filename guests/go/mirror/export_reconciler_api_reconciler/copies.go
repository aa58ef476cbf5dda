package export_reconciler_api_reconciler

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"wit_component/reconciler"
)

// copies is the copies of one Mirror's source, found by their owner labels.
type copies struct {
	owner  reconciler.ObjectRef
	labels map[string]string
	// The lister's selector for them: the namespace label, then the name label.
	selector string
}

func newCopies(owner reconciler.ObjectRef) *copies {
	return &copies{
		owner:    owner,
		labels:   map[string]string{ownerNamespaceLabel: owner.Namespace, ownerNameLabel: owner.Name},
		selector: ownerNamespaceLabel + "=" + owner.Namespace + "," + ownerNameLabel + "=" + owner.Name,
	}
}

// outcome is what a sync left: the namespaces holding a copy (sorted), those listed but missing
// (in the spec's order), and the Ready condition's status, reason and message.
type outcome struct {
	ready               bool
	reason, message     string
	namespaces, missing []string
}

func (c *copies) sync(s spec) (outcome, error) {
	sourceRef := reconciler.ObjectRef{Kind: configMapKind, Namespace: c.owner.Namespace, Name: s.source}
	sourceObject, err := reconciler.Get(sourceRef)
	if err = call("read the source", err); err != nil {
		return outcome{}, err
	}
	if sourceObject == nil {
		owned, err := c.owned(s.source)
		if err != nil {
			return outcome{}, err
		}
		held := []string{}
		for _, copy := range owned {
			held = append(held, str(copy, "metadata", "namespace"))
		}
		sort.Strings(held)
		message := fmt.Sprintf("namespace %s has no ConfigMap %s; its copies are left as they are", c.owner.Namespace, s.source)
		return outcome{reason: "SourceNotFound", message: message, namespaces: held, missing: []string{}}, nil
	}
	source, err := sourceObject.Fields()
	if err != nil {
		return outcome{}, err
	}
	copied, missing, conflicts, written := []string{}, []string{}, []string{}, []string{}
	for _, namespace := range s.targets {
		exists, err := namespaceExists(namespace)
		if err != nil {
			return outcome{}, err
		}
		if !exists {
			missing = append(missing, namespace)
			continue
		}
		existing, err := reconciler.Get(reconciler.ObjectRef{Kind: configMapKind, Namespace: namespace, Name: s.source})
		if err = call("read the copy in "+namespace, err); err != nil {
			return outcome{}, err
		}
		var fields map[string]any
		if existing != nil {
			if fields, err = existing.Fields(); err != nil {
				return outcome{}, err
			}
			if !c.made(fields) {
				conflicts = append(conflicts, namespace)
				continue
			}
		}
		if existing == nil || !sameContent(fields, source) {
			if err := c.write(namespace, source); err != nil {
				return outcome{}, err
			}
			written = append(written, namespace)
		}
		copied = append(copied, namespace)
	}
	keep := map[[2]string]bool{}
	for _, namespace := range copied {
		keep[[2]string{namespace, s.source}] = true
	}
	removed, err := c.deleteAllBut(keep)
	if err != nil {
		return outcome{}, err
	}
	if len(written) > 0 {
		reconciler.LogInfof("copied %s to %s", s.source, strings.Join(written, ", "))
		reconciler.NormalEvent(c.owner, "Copied", fmt.Sprintf("ConfigMap %s to %s", s.source, strings.Join(written, ", ")))
	}
	if len(removed) > 0 {
		reconciler.NormalEvent(c.owner, "Removed", "copies in "+strings.Join(removed, ", "))
	}
	sort.Strings(copied)
	noun := "copies"
	if len(copied) == 1 {
		noun = "copy"
	}
	message := fmt.Sprintf("%d %s of ConfigMap %s", len(copied), noun, s.source)
	if len(copied) > 0 {
		message += ": " + strings.Join(copied, ", ")
	}
	if len(missing) > 0 {
		message += "; skipped, no such namespace: " + strings.Join(missing, ", ")
	}
	if len(conflicts) > 0 {
		message += fmt.Sprintf("; a ConfigMap %s this Mirror did not make is in: %s", s.source, strings.Join(conflicts, ", "))
		return outcome{reason: "TargetConflict", message: message, namespaces: copied, missing: missing}, nil
	}
	return outcome{ready: true, reason: "Synced", message: message, namespaces: copied, missing: missing}, nil
}

// owned is this Mirror's copies, wherever they are (of name only, unless it is "").
func (c *copies) owned(name string) ([]map[string]any, error) {
	found, err := reconciler.List(configMapKind, "", c.selector)
	if err = call("list copies", err); err != nil {
		return nil, err
	}
	owned := []map[string]any{}
	for _, object := range found {
		fields, err := object.Fields()
		if err != nil {
			return nil, err
		}
		if name == "" || str(fields, "metadata", "name") == name {
			owned = append(owned, fields)
		}
	}
	return owned, nil
}

// made reports whether this Mirror made configMap: both owner labels name it.
func (c *copies) made(configMap map[string]any) bool {
	metadata, _ := configMap["metadata"].(map[string]any)
	labels, _ := metadata["labels"].(map[string]any)
	for label, value := range c.labels {
		if labels[label] != value {
			return false
		}
	}
	return true
}

// write applies the copy; it deletes and applies it again when the stored copy keeps a key the
// source does not have (added by another field manager, which apply cannot remove).
func (c *copies) write(namespace string, source map[string]any) error {
	name := str(source, "metadata", "name")
	copy := map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": name, "namespace": namespace, "labels": c.labels},
	}
	for _, field := range []string{"data", "binaryData"} {
		if value, _ := source[field].(map[string]any); len(value) > 0 {
			copy[field] = value
		}
	}
	applied, err := reconciler.Apply(copy)
	if err = call("apply the copy in "+namespace, err); err != nil {
		return err
	}
	stored, err := applied.Fields()
	if err != nil {
		return err
	}
	if sameContent(stored, source) {
		return nil
	}
	_, err = reconciler.Delete(reconciler.ObjectRef{Kind: configMapKind, Namespace: namespace, Name: name})
	if err = call("delete the copy in "+namespace, err); err != nil {
		return err
	}
	_, err = reconciler.Apply(copy)
	return call("apply the copy in "+namespace, err)
}

// deleteAllBut deletes every copy whose (namespace, name) is not in keep, and returns their
// namespaces, sorted.
func (c *copies) deleteAllBut(keep map[[2]string]bool) ([]string, error) {
	owned, err := c.owned("")
	if err != nil {
		return nil, err
	}
	removed := []string{}
	for _, copy := range owned {
		namespace, name := str(copy, "metadata", "namespace"), str(copy, "metadata", "name")
		if keep[[2]string{namespace, name}] {
			continue
		}
		_, err := reconciler.Delete(reconciler.ObjectRef{Kind: configMapKind, Namespace: namespace, Name: name})
		if err = call("delete the copy in "+namespace, err); err != nil {
			return nil, err
		}
		removed = append(removed, namespace)
	}
	sort.Strings(removed)
	return removed, nil
}

// namespaceExists reports whether the Namespace name exists and is not being deleted.
func namespaceExists(name string) (bool, error) {
	object, err := reconciler.Get(reconciler.ObjectRef{Kind: namespaceKind, Name: name})
	if err = call("read namespace "+name, err); err != nil || object == nil {
		return false, err
	}
	namespace, err := object.Fields()
	if err != nil {
		return false, err
	}
	terminating := str(namespace, "status", "phase") == "Terminating"
	metadata, _ := namespace["metadata"].(map[string]any)
	deleting, _ := metadata["deletionTimestamp"].(string)
	return !terminating && deleting == "", nil
}

// sameContent reports whether a copy holds the source's data and binaryData (absent and empty
// alike).
func sameContent(copy, source map[string]any) bool {
	for _, field := range []string{"data", "binaryData"} {
		a, _ := copy[field].(map[string]any)
		b, _ := source[field].(map[string]any)
		if len(a) != len(b) || (len(a) > 0 && !reflect.DeepEqual(a, b)) {
			return false
		}
	}
	return true
}

// str is the string at path in a decoded object, or "".
func str(object map[string]any, path ...string) string {
	var value any = object
	for _, field := range path {
		fields, _ := value.(map[string]any)
		value = fields[field]
	}
	text, _ := value.(string)
	return text
}
