// Shape of a public Go process manager (code index, query: draft-max, id 53316948573):
// exec.Command argv built with append. Reconstructed.
package manager

func (m *Manager) draftArgs(args []string, draftPath string) []string {
	return append(args,
		"--model-draft", draftPath,
		"--draft-max", "16",
		"--draft-min", "5",
	)
}
