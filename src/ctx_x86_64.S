/*
 * The context switch for x86-64, System V ABI.
 *
 *   void *weft__ctx_jump(void **save_sp, void *new_sp, void *arg)
 *                        %rdi            %rsi          %rdx
 *
 * The ABI makes the callee preserve rbx, rbp, r12-r15, rsp, the control
 * bits of MXCSR and the x87 control word; everything else is the caller's
 * to save, and the compiler already assumes a call clobbers it. So a switch
 * is: push those, store rsp, load the other rsp, pop, return. The frame a
 * suspended context leaves on its stack (low addresses first):
 *
 *        +--------------------+  <- saved sp (16-byte aligned)
 *   +0   | MXCSR   | x87 CW   |
 *   +8   | r12                |
 *   +16  | r13                |
 *   +24  | r14                |
 *   +32  | r15                |
 *   +40  | rbx                |
 *   +48  | rbp                |
 *   +56  | return address     |
 *        +--------------------+
 *
 * weft__ctx_make (ctx_asm.c) builds the same frame on a fresh stack, with
 * r12 = the entry function and the return address = weft__ctx_trampoline.
 * `arg` comes back in rax (the return value) and also in rdi, so that a
 * fresh context receives it as entry's first argument.
 */
/* The body of both entry points below; they differ only in how they leave. */
.macro SWITCH_BODY
	pushq %rbp
	pushq %rbx
	pushq %r15
	pushq %r14
	pushq %r13
	pushq %r12
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r12
	popq %r13
	popq %r14
	popq %r15
	popq %rbx
	popq %rbp
	movq %rdx, %rax
	movq %rdx, %rdi
.endm

	.text
/* Called (tasks): both sides usually suspended at the same call site, so
 * the return-address predictor's top entry is right and `ret` is cheap. */
	.globl weft__ctx_jump
	.hidden weft__ctx_jump
	.type weft__ctx_jump,@function
	.p2align 4
weft__ctx_jump:
	.cfi_startproc
	SWITCH_BODY
	ret
	.cfi_endproc
	.size weft__ctx_jump,.-weft__ctx_jump

/* Tail-called (generators): nothing was pushed on the return-address
 * predictor for this jump, so a `ret` would pop the user's own call site
 * and mispredict every time. An indirect jump is predicted from its own
 * history instead, which a send/yield ping-pong makes regular. */
	.globl weft__ctx_jump_int
	.hidden weft__ctx_jump_int
	.type weft__ctx_jump_int,@function
	.p2align 4
weft__ctx_jump_int:
	.cfi_startproc
	SWITCH_BODY
	popq %rcx
	jmp *%rcx
	.cfi_endproc
	.size weft__ctx_jump_int,.-weft__ctx_jump_int

/* The first "return" of a fresh context lands here with rsp 16-byte aligned,
 * r12 = entry and rdi = arg. entry never returns; if it did, ud2 traps. The
 * undefined return address ends a debugger's backtrace here. */
	.globl weft__ctx_trampoline
	.hidden weft__ctx_trampoline
	.type weft__ctx_trampoline,@function
	.p2align 4
weft__ctx_trampoline:
	.cfi_startproc
	.cfi_undefined rip
	call *%r12
	ud2
	.cfi_endproc
	.size weft__ctx_trampoline,.-weft__ctx_trampoline

	.section .note.GNU-stack,"",@progbits
