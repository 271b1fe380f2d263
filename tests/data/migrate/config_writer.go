// Shape of a public Go llama-swap config generator (code index, query: draft-max,
// id 38912255478): flags written into YAML text at run time. Reconstructed.
package gen

func writeDraft(config *strings.Builder, draftModel *Model) {
	if draftModel != nil {
		config.WriteString("      --model-draft " + draftModel.Path + "\n")
		config.WriteString("      -ngld 99\n")
		config.WriteString("      --draft-max 16\n")
		config.WriteString("      --draft-min 4\n")
	}
}
